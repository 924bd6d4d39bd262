// Recovery points on idem::redis::Store: a step recorded by a worker process that is then
// SIGKILLed is kept across the takeover (which says after_crash), steps recorded by 16 threads
// at once are all kept with their first results, and a takeover decided before a late step
// of the old claim never writes over it.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/redis.hpp>

#include "../support/redis_server.hpp"
#include "../support/threads.hpp"
#include "raw.hpp"

using namespace std::chrono_literals;
using idem_test::RedisStore;

namespace {

volatile std::sig_atomic_t never = 0;

}  // namespace

TEST_CASE("a step recorded before a SIGKILL is kept across the takeover, which says after_crash") {
  // The child opens its own connections after fork() and reports only through the pipe and
  // its death; the parent looks at the store afterwards.
  const idem::redis::StoreParams params = idem_test::fresh_params();
  const idem::Key key{"ORDER", "crashed-mid-business"};
  const idem::Options options{.lease = 1s, .ttl = 1h};
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    try {
      auto pool = idem_test::make_redis_pool(1);
      idem::redis::Store store(pool, params);
      idem::run_once(
          store, key, "fp",
          [&](idem::Attempt<idem::redis::Store>& attempt) {
            const int hold = attempt.step("reserve", [] { return 41; });
            const char byte = 'r';
            if (::write(ready[1], &byte, 1) != 1) ::_exit(72);
            while (never == 0)
              ::pause();  // SIGKILLed here, in the middle of the business
            return hold;
          },
          options);
    } catch (...) {
      ::_exit(71);
    }
    ::_exit(70);
  }
  ::close(ready[1]);
  char byte = 0;
  const bool reached = ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  ::kill(child, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(reached);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  auto pool = idem_test::make_redis_pool(2);
  idem::redis::Store store(pool, params);
  const auto crashed = store.find(key);
  REQUIRE(crashed);
  CHECK(crashed->status == idem::Status::processing);
  CHECK(idem::detail::kept_result(crashed->recovery_points, "reserve") == "41");
  // While its lease runs, the dead worker's claim still counts.
  CHECK(store.claim(key, "fp", options).verdict == idem::Verdict::in_progress);
  std::this_thread::sleep_for(1100ms);

  int reserved = 0;
  int charged = 0;
  bool after_crash = false;
  std::uint32_t number = 0;
  const auto out = idem::run_once(
      store, key, "fp",
      [&](idem::Attempt<idem::redis::Store>& attempt) {
        after_crash = attempt.after_crash();
        number = attempt.number();
        const int hold = attempt.step("reserve", [&] {
          ++reserved;
          return 0;
        });
        return attempt.step("charge", [&] {
          ++charged;
          return hold + 1;
        });
      },
      options);
  REQUIRE(out);
  CHECK(out.value() == 42);
  CHECK(after_crash);
  CHECK(number == 2);
  CHECK(reserved == 0);  // the kept result, not a second run
  CHECK(charged == 1);
  const auto done = store.find(key);
  REQUIRE(done);
  CHECK(done->status == idem::Status::succeeded);
  CHECK(done->ticket.fence == crashed->ticket.fence + 1);
  CHECK(nlohmann::json::parse(done->recovery_points) ==
        nlohmann::json{{"reserve", 41}, {"charge", 42}});

  // A takeover of an expired record starts afresh: no steps, no after_crash.
  const idem::Key old{"ORDER", "expired-with-steps"};
  const auto c = store.claim(old, "fp", idem::Options{.lease = 100ms, .ttl = 150ms});
  store.record_step(old, c.record.ticket, "reserve", "1");
  std::this_thread::sleep_for(250ms);
  const auto fresh = store.claim(old, "fp", options);
  REQUIRE(fresh.verdict == idem::Verdict::acquired);
  CHECK_FALSE(fresh.after_crash);
  CHECK(fresh.record.recovery_points.empty());
  CHECK(fresh.record.attempts == 1);
}

TEST_CASE("record_step keeps a step's first result, and is LeaseLost once the claim is not held") {
  RedisStore s;
  const idem::Key key{"ORDER", "steps-held"};
  const auto c = s.store.claim(key, "", idem::Options{.lease = 100ms, .ttl = 1h});
  CHECK(s.store.record_step(key, c.record.ticket, "reserve", R"({"hold":1})") ==
        R"({"reserve":{"hold":1}})");
  // Recorded again (a retried step), the first result stays and the points are not rewritten.
  const auto before = s.store.find(key);
  CHECK(s.store.record_step(key, c.record.ticket, "reserve", R"({"hold":2})") ==
        R"({"reserve":{"hold":1}})");
  CHECK(s.store.find(key) == before);
  CHECK_THROWS_AS(s.store.record_step(key, c.record.ticket, "bad name", "1"),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(s.store.record_step(key, c.record.ticket, "charge", "not json"),
                  idem::InvalidArgument);

  std::this_thread::sleep_for(150ms);
  const auto next = s.store.claim(key, "", {});
  REQUIRE(next.verdict == idem::Verdict::acquired);
  CHECK(next.after_crash);
  CHECK(next.record.recovery_points == R"({"reserve":{"hold":1}})");
  CHECK_THROWS_AS(s.store.record_step(key, c.record.ticket, "charge", "1"), idem::LeaseLost);
  CHECK_THROWS_AS(s.store.record_step(idem::Key{"ORDER", "none"}, c.record.ticket, "charge", "1"),
                  idem::LeaseLost);
  s.store.complete(key, next.record.ticket, "{}");
  CHECK_THROWS_AS(s.store.record_step(key, next.record.ticket, "charge", "1"), idem::LeaseLost);
}

TEST_CASE("record_step with a guess of the stored points writes at once, and reads when stale") {
  RedisStore s;
  const idem::Key key{"ORDER", "steps-known"};
  const auto c = s.store.claim(key, "", idem::Options{.lease = 30s, .ttl = 1h});
  s.store.record_step(key, c.record.ticket, "reserve", "1");
  // What an Attempt passes: the points it knows of. Right, the guarded write goes through.
  CHECK(s.store.record_step(key, c.record.ticket, "charge", "2", R"({"reserve":1})") ==
        R"({"charge":2,"reserve":1})");
  // Stale: the guarded write changes nothing, and the step joins the points as they are.
  CHECK(s.store.record_step(key, c.record.ticket, "ship", "3", std::string_view{}) ==
        R"({"charge":2,"reserve":1,"ship":3})");
  CHECK(s.store.record_step(key, c.record.ticket, "pack", "4", R"({"reserve":1})") ==
        R"({"charge":2,"pack":4,"reserve":1,"ship":3})");
  CHECK(s.store.find(key)->recovery_points == R"({"charge":2,"pack":4,"reserve":1,"ship":3})");
  // A claim no longer held is LeaseLost, whatever the guess.
  s.store.complete(key, c.record.ticket, "{}");
  CHECK_THROWS_AS(s.store.record_step(key, c.record.ticket, "late", "5", std::string_view{}),
                  idem::LeaseLost);
}

TEST_CASE("16 threads record steps of one claim at once: every step is kept, first result wins") {
  constexpr int threads = 16;
  constexpr int own_steps = 3;  // 16 * 3 + 1 shared step: inside max_steps
  RedisStore s(threads);
  const idem::Key key{"ORDER", "steps-race"};
  const auto c = s.store.claim(key, "", idem::Options{.lease = 30s, .ttl = 1h});
  std::vector<std::string> shared_seen(threads);
  idem_test::Errors errors;
  idem_test::run_threads(threads, [&](int t) {
    try {
      for (int i = 0; i < own_steps; ++i) {
        s.store.record_step(key, c.record.ticket,
                            "t" + std::to_string(t) + "-s" + std::to_string(i),
                            std::to_string(t * 10 + i));
      }
      const std::string points =
          s.store.record_step(key, c.record.ticket, "shared", std::to_string(t));
      shared_seen[static_cast<std::size_t>(t)] = *idem::detail::kept_result(points, "shared");
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  INFO("first error: " << errors.first());
  REQUIRE(errors.size() == 0);
  const auto r = s.store.find(key);
  REQUIRE(r);
  const nlohmann::json points = nlohmann::json::parse(r->recovery_points);
  CHECK(points.size() == threads * own_steps + 1);
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < own_steps; ++i) {
      CHECK(points.at("t" + std::to_string(t) + "-s" + std::to_string(i)) == t * 10 + i);
    }
    // Every caller was answered the one kept result of the shared step.
    CHECK(shared_seen[static_cast<std::size_t>(t)] == points.at("shared").dump());
  }
}

TEST_CASE("a takeover decided before a late step of the old claim does not write over it") {
  RedisStore s;
  const idem::Key key{"ORDER", "late-step"};
  const auto first = s.store.claim(key, "", idem::Options{.lease = 100ms, .ttl = 1h});
  s.store.record_step(key, first.record.ticket, "reserve", "1");
  std::this_thread::sleep_for(150ms);
  auto c = s.pool->acquire();
  const auto read = s.store.ops().read(*c, key, false);
  REQUIRE(read);
  const idem::backend::Decision d = idem::backend::decide(read->record, "", read->now);
  REQUIRE(d == idem::backend::Decision::take_over_stale);
  const idem::Record next = idem::backend::take_over(
      read->record, d, "", "recoverer-token-0000000000000000", read->now, {});

  // The old worker was only slow: it records a step between the read and the write.
  s.store.record_step(key, first.record.ticket, "charge", "2");
  CHECK_FALSE(s.store.ops().write_takeover(*c, d, next, read->record.ticket));
  // The next claim reads again and takes over with both steps.
  const auto again = s.store.claim(key, "", {});
  REQUIRE(again.verdict == idem::Verdict::acquired);
  CHECK(again.after_crash);
  CHECK(nlohmann::json::parse(again.record.recovery_points) ==
        nlohmann::json{{"reserve", 1}, {"charge", 2}});
  CHECK(s.store.find(key)->recovery_points == again.record.recovery_points);
}
