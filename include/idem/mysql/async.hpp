#pragma once
// idem::mysql for coroutines (docs/async.md): AsyncStore on AsyncPool and AsyncConnection,
// MariaDB Connector/C's non-blocking API driven by Boost.Asio. Link idem::mysql and
// idem::async.

#include "idem/async.hpp"
#include "idem/mysql/async_connection.hpp"
#include "idem/mysql/async_pool.hpp"
#include "idem/mysql/async_state_machine.hpp"
#include "idem/mysql/async_store.hpp"
#include "idem/mysql/async_transaction.hpp"
