#pragma once
// Shared set-up of the coroutine Redis tests: an AsyncStore under a fresh prefix on its own
// pipelined pool, beside a blocking store on the same prefix for set-up and counting.
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <idem/redis/async.hpp>

#include "loop.hpp"
#include "redis_server.hpp"

namespace idem_test {

// `executor`: where the pool's connections live (the test's loop, or a thread's running one).
struct RedisAsyncStore {
  idem::redis::StoreParams params;
  std::shared_ptr<idem::redis::AsyncPool> pool;
  idem::redis::AsyncStore store;
  RedisStore blocking_pool{2};
  idem::redis::Store blocking;  // the same prefix

  RedisAsyncStore(boost::asio::any_io_executor executor, std::size_t connections = 1,
                  idem::redis::StoreParams p = {},
                  idem::redis::ConnectionParams connect = redis_server())
      : params(fresh_params(std::move(p))),
        pool(std::make_shared<idem::redis::AsyncPool>(
            std::move(executor), std::move(connect), idem::redis::PoolParams{.size = connections})),
        store(pool, params),
        blocking(blocking_pool.pool, params) {}
};

// A loop running on a thread of its own, for a pool whose callers wait from other threads
// (BlockingStore given its executor).
struct LoopThread {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  ~LoopThread() {
    work.reset();
    io.stop();
    thread.join();
  }
};

}  // namespace idem_test
