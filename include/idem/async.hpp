#pragma once
// idem's coroutine API on Boost.Asio (docs/async.md): AwaitableStore, IdempotencyGuard, run_once,
// Attempt, ResolverCall, and the adapters that make a Store usable from a coroutine. Link
// idem::async. The non-blocking MariaDB store is idem/mysql/async.hpp.

#include "idem/async/attempt.hpp"
#include "idem/async/batch.hpp"
#include "idem/async/consume.hpp"
#include "idem/async/guard.hpp"
#include "idem/async/inline_store.hpp"
#include "idem/async/janitor.hpp"
#include "idem/async/net.hpp"
#include "idem/async/offload_store.hpp"
#include "idem/async/resolver.hpp"
#include "idem/async/run_once.hpp"
#include "idem/async/store.hpp"
