#pragma once
// What the coroutine scenarios share (built with IDEM_BENCH_ASYNC only): a round's requests
// handed out to the coroutines that keep them in flight, run on the bench thread's io_context.
#include <cstddef>
#include <exception>
#include <utility>
#include <vector>

#include <idem/async/net.hpp>

namespace bench {

// The requests of one round, handed out in order to the coroutines that keep them in flight
// (all on the one loop thread: no locking); `runs` counts the business's executions.
struct Feed {
  int round;
  std::size_t total;
  std::size_t next = 0;
  long runs = 0;
};

// Runs the coroutines on `io` from this thread until all have ended; rethrows the first error.
inline void run_all(idem::async::net::io_context& io,
                    std::vector<idem::async::net::awaitable<void>> coroutines) {
  namespace net = idem::async::net;
  std::exception_ptr failed;
  for (auto& c : coroutines)
    net::co_spawn(io, std::move(c), [&](std::exception_ptr e) {
      if (e && !failed) failed = e;
    });
  io.restart();
  io.run();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace bench
