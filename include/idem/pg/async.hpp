#pragma once
// idem::pg for coroutines (docs/postgres.md, "Coroutines"; docs/async.md): AsyncStore on
// AsyncPool and AsyncConnection, libpq's asynchronous API driven by Boost.Asio. Link idem::pg
// and idem::async.

#include "idem/async.hpp"
#include "idem/pg/async_connection.hpp"
#include "idem/pg/async_pool.hpp"
#include "idem/pg/async_state_machine.hpp"
#include "idem/pg/async_store.hpp"
#include "idem/pg/async_transaction.hpp"
