// Workers that die or stall: a child process SIGKILLed between claim and commit, and a worker
// that sleeps past its lease while another takes the claim over.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "../support/fault_server.hpp"

using namespace std::chrono_literals;
using idem_fault::BusinessTable;
using idem_fault::Tally;

namespace {

// A pipe the child writes one byte to once it holds the claim.
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  }
  ~Pipe() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TEST_CASE(
    "crashed worker - a child SIGKILLed after its claim: duplicates answer in_progress during the "
    "lease, exactly one retry runs after it") {
  idem_test::Table t(16);
  BusinessTable biz(t.pool);
  const idem::Key key{"PAY", "crashed-worker"};
  const auto fp = idem::fingerprint(nlohmann::json{{"trade_no", key.id()}, {"amount", 500}});
  const idem::Options options{.lease = 2s, .ttl = 1h};

  // The parent runs no other thread here; the child opens its own pool after fork() and never
  // returns into Catch2.
  Pipe ready;
  const pid_t child = ::fork();
  if (child == 0) {
    int code = 70;
    try {
      auto pool = idem_test::make_pool(2);
      idem::mysql::Store store(pool, {.table = t.name});
      const auto claim = store.claim(key, fp, options);
      if (claim.verdict == idem::Verdict::acquired) {
        // The business has begun (an uncommitted write) when the process dies.
        auto c = pool->acquire();
        c->query("START TRANSACTION");
        biz.insert(*c, key.id());
        const char byte = 'x';
        [[maybe_unused]] const auto n = ::write(ready.fds[1], &byte, 1);
        for (;;)
          ::pause();  // until SIGKILL
      }
      code = 72;
    } catch (...) {
      code = 71;
    }
    ::_exit(code);
  }
  REQUIRE(child > 0);
  ::close(ready.fds[1]);
  ready.fds[1] = -1;
  char byte = 0;
  const bool claimed = ::read(ready.fds[0], &byte, 1) == 1;

  // While the lease holds, every duplicate answers in_progress and nothing runs.
  Tally during;
  idem_test::run_threads(8, [&](int) {
    for (int i = 0; i < 4; ++i) {
      during.call(key.id(), [&] {
        return idem::run_once(
            t.store, key, fp,
            [&] {
              ++during.executed;
              return std::string("paid");
            },
            options);
      });
    }
  });

  ::kill(child, SIGKILL);
  int status = 0;
  const bool reaped = ::waitpid(child, &status, 0) == child;
  const auto stuck = t.store.find(key);

  // After the lease, duplicates race: exactly one takes over and runs, the others replay.
  std::this_thread::sleep_for(options.lease + 200ms);
  Tally after;
  idem_test::run_threads(16, [&](int) {
    after.call(key.id(), [&] {
      return idem::run_once(
          t.store, key, fp,
          [&] {
            ++after.executed;
            auto c = t.pool->acquire();
            biz.insert(*c, key.id());
            return std::string("paid");
          },
          idem::Options{.lease = 2s, .ttl = 1h, .wait = 10s});
    });
  });

  INFO("untyped: " << during.first_untyped << " / " << after.first_untyped);
  REQUIRE(claimed);
  REQUIRE(reaped);
  CHECK(WIFSIGNALED(status));
  REQUIRE(stuck);
  CHECK(stuck->status == idem::Status::processing);
  CHECK(during.in_progress == 32);
  CHECK(during.executed == 0);
  CHECK(during.typed_errors + during.untyped_errors == 0);
  CHECK(after.executed == 1);
  CHECK(after.acquired == 1);
  CHECK(after.replayed == 15);
  CHECK(after.typed_errors + after.untyped_errors == 0);
  CHECK(biz.rows() == 1);  // the child's uncommitted write died with its connection
  const auto r = t.store.find(key);
  REQUIRE(r);
  CHECK(r->status == idem::Status::succeeded);
  CHECK(r->ticket.fence == 2);
  CHECK(r->attempts == 2);
  idem::Janitor janitor(t.store, {.interval = std::chrono::hours{1}});
  janitor.run_once();
  CHECK(idem_fault::processing_past_lease(t) == 0);
}

TEST_CASE(
    "lease race - a worker stalls past its lease, another takes over and commits, the first "
    "wakes: LeaseLost, the second's result stands") {
  idem_test::Table t(8);
  BusinessTable biz(t.pool);
  const idem::Key key{"PAY", "lease-race"};
  const idem::Options short_lease{.lease = 500ms, .ttl = 1h};

  std::mutex m;
  std::condition_variable cv;
  bool first_claimed = false, second_done = false;
  std::string first_error = "none", first_after = "none", second_verdict = "none";
  bool first_lost = false, second_acquired = false;

  std::thread first([&] {
    try {
      idem::IdempotencyGuard guard{t.store, key, "", short_lease};
      {
        std::lock_guard lock(m);
        first_claimed = guard.acquired();
      }
      cv.notify_all();
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return second_done; });  // stalls (a GC pause, a slow call) meanwhile
      lock.unlock();
      try {
        guard.commit(std::string("first"));
      } catch (const idem::LeaseLost&) {
        first_lost = true;
      }
      try {
        guard.fail({{"error", "late"}}, true);  // the guard is closed: nothing more is written
      } catch (const idem::UsageError&) {
        first_after = "UsageError";
      }
    } catch (const std::exception& e) {
      first_error = e.what();
    }
  });
  std::thread second([&] {
    try {
      {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return first_claimed; });
      }
      std::optional<idem::IdempotencyGuard<idem::mysql::Store>> guard;
      guard.emplace(t.store, key, "", short_lease);
      while (!guard->acquired()) {  // in_progress until the first one's lease runs out
        std::this_thread::sleep_for(50ms);
        guard.reset();
        guard.emplace(t.store, key, "", short_lease);
      }
      second_acquired = true;
      auto c = t.pool->acquire();
      biz.insert(*c, key.id());
      guard->commit(std::string("second"));
      second_verdict = "committed";
    } catch (const std::exception& e) {
      second_verdict = e.what();
    }
    {
      std::lock_guard lock(m);
      second_done = true;
    }
    cv.notify_all();
  });
  first.join();
  second.join();

  CHECK(first_error == "none");
  CHECK(first_claimed);
  CHECK(second_acquired);
  CHECK(second_verdict == "committed");
  CHECK(first_lost);
  CHECK(first_after == "UsageError");
  const auto r = t.store.find(key);
  REQUIRE(r);
  CHECK(r->status == idem::Status::succeeded);
  CHECK(r->snapshot == R"("second")");
  CHECK(r->ticket.fence == 2);
  CHECK(biz.rows() == 1);
  CHECK(t.store.claim(key, "", short_lease).verdict == idem::Verdict::replayed);
  idem::Janitor janitor(t.store, {.interval = std::chrono::hours{1}});
  janitor.run_once();
  CHECK(idem_fault::processing_past_lease(t) == 0);
}
