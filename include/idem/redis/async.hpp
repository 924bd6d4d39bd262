#pragma once
// idem's coroutine API on Redis: the pipelined connection, its pool and the store
// (docs/redis.md, "Coroutines"), with the coroutine API itself (idem/async.hpp).

#include "idem/async.hpp"
#include "idem/redis/async_connection.hpp"
#include "idem/redis/async_pool.hpp"
#include "idem/redis/async_store.hpp"
