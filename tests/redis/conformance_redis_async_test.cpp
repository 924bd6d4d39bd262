// The store conformance suite on idem::redis::AsyncStore (pipelined connections on the caller's
// executor) against the real redis-server, through idem::testing::BlockingStore: the same cases
// as the blocking store's. Time comes from the server's clock, so advance() sleeps.
#include <chrono>
#include <thread>
#include <tuple>

#include <idem/testing/blocking_store.hpp>

#include "../support/redis_async.hpp"

namespace {

// The pool's connections live on a loop thread of their own, where each BlockingStore call runs
// while the test's thread waits.
struct RedisAsyncFixture {
  idem_test::LoopThread loop;
  idem_test::RedisAsyncStore s{loop.io.get_executor(), 2};
  idem::testing::BlockingStore<idem::redis::AsyncStore> blocking{s.store, loop.io.get_executor()};
  RedisAsyncFixture() { s.blocking.ensure_schema(); }
  idem::testing::BlockingStore<idem::redis::AsyncStore>& store() { return blocking; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

// One bucket, not stamped: the hashes of layout 1 (see conformance_redis_test.cpp).
struct RedisAsyncOneBucketFixture {
  idem_test::LoopThread loop;
  idem_test::RedisAsyncStore s{loop.io.get_executor(), 1, idem::redis::StoreParams{.buckets = 1}};
  idem::testing::BlockingStore<idem::redis::AsyncStore> blocking{s.store, loop.io.get_executor()};
  idem::testing::BlockingStore<idem::redis::AsyncStore>& store() { return blocking; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<RedisAsyncFixture, RedisAsyncOneBucketFixture>
#include <idem/testing/conformance.hpp>
