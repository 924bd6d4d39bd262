#pragma once
// idem on SQLite: the embedded store that survives restarts. Link the CMake target idem::sqlite.

#include "idem/idem.hpp"
#include "idem/sqlite/connection.hpp"
#include "idem/sqlite/errors.hpp"
#include "idem/sqlite/janitor.hpp"
#include "idem/sqlite/pool.hpp"
#include "idem/sqlite/schema.hpp"
#include "idem/sqlite/state_machine.hpp"
#include "idem/sqlite/store.hpp"
#include "idem/sqlite/transaction.hpp"
