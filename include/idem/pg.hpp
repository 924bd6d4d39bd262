#pragma once
// idem on PostgreSQL (libpq): the store, its pool and connections, and its transactions on the
// service's own connections. See docs/postgres.md.

#include "idem/idem.hpp"
#include "idem/pg/connection.hpp"
#include "idem/pg/errors.hpp"
#include "idem/pg/janitor.hpp"
#include "idem/pg/pool.hpp"
#include "idem/pg/schema.hpp"
#include "idem/pg/schema_check.hpp"
#include "idem/pg/state_machine.hpp"
#include "idem/pg/store.hpp"
#include "idem/pg/transaction.hpp"
