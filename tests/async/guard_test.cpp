// idem::async::IdempotencyGuard's claim path with resolvers: a claim that takes over a crashed
// attempt (a ManualClock moved past its lease) is settled by the resolver of its biz_type, exactly
// as the blocking guard settles it, while the loop keeps serving; the same through async::run_once.
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/idem.hpp>

#include "../support/loop.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;
using idem::Resolution;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

struct Events : idem::Observer {
  std::mutex m;
  std::vector<idem::EventKind> kinds;
  void on_event(const idem::Event& e) noexcept override {
    std::lock_guard lock(m);
    kinds.push_back(e.kind);
  }
};

// A MemoryStore on a ManualClock, and a worker that claimed a key and died: its lease ran out.
struct Crash {
  idem::ManualClock clock;
  idem::MemoryStore memory{[this] { return clock.now(); }};
  idem::async::InlineStore<idem::MemoryStore> store{memory};
  idem::Resolvers resolvers;
  net::io_context io;
  std::atomic<int> asked{0};

  idem::Options options(idem::Observer* observer = nullptr) const {
    return {.lease = 1s, .observer = observer, .resolvers = &resolvers};
  }

  void crash(const idem::Key& key) {
    REQUIRE(memory.claim(key, "fp", {.lease = 1s}).verdict == idem::Verdict::acquired);
    clock.advance(2s);
  }

  // The resolver of PAY answers by the key's id.
  void add_resolver() {
    resolvers.add("PAY", [this](const idem::Record& r, const idem::ResolveContext&) {
      ++asked;
      const std::string& id = r.key.id();
      if (id.starts_with("happened")) return Resolution::happened(json{{"charge", "ch_" + id}});
      if (id.starts_with("not_happened")) return Resolution::not_happened();
      if (id.starts_with("throws")) throw std::runtime_error("gateway lookup failed");
      return Resolution::unknown("the gateway says 503");
    });
  }

  template <class T>
  T run(net::awaitable<T> a) {
    return idem_test::run_on(io, std::move(a));
  }

  using Guard = idem::async::IdempotencyGuard<idem::async::InlineStore<idem::MemoryStore>>;
};

}  // namespace

TEST_CASE_METHOD(Crash,
                 "async guard: a resolver that says happened settles a crashed attempt as "
                 "a replay of its response, and nothing runs") {
  add_resolver();
  const idem::Key key{"PAY", "happened-1"};
  crash(key);
  Events events;
  int ran = 0;
  auto charge = [&] {
    ++ran;
    return json{{"charge", "again"}};
  };
  const auto out = run(idem::async::run_once(store, key, "fp", charge, options(&events)));
  CHECK(out.replayed());
  REQUIRE(out);
  CHECK(out.value() == json{{"charge", "ch_happened-1"}});
  CHECK(ran == 0);
  CHECK(asked == 1);
  const auto stored = memory.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::succeeded);
  CHECK(stored->repaired_at);
  CHECK_THAT(stored->repair_reason, Catch::Contains("happened"));
  CHECK(events.kinds.front() == idem::EventKind::replayed);
  // The next duplicate replays the record; the resolver is not asked again.
  const auto again = run(idem::async::run_once(store, key, "fp", charge, options()));
  CHECK(again.replayed());
  CHECK(again.value() == json{{"charge", "ch_happened-1"}});
  CHECK(asked == 1);
}

TEST_CASE_METHOD(Crash,
                 "async guard: a resolver that says not_happened lets the claim run, "
                 "still marked after_crash") {
  add_resolver();
  const idem::Key key{"PAY", "not_happened-1"};
  crash(key);
  auto guard = run(Guard::claim(store, key, "fp", options()));
  CHECK(guard.acquired());
  CHECK(guard.after_crash());
  CHECK(guard.record().ticket.fence == 2);
  CHECK(asked == 1);
  run([&]() -> net::awaitable<int> {
    const json charge{{"charge", "ch_new"}};
    co_await guard.commit(charge);
    co_return 0;
  }());
  CHECK(memory.find(key)->status == idem::Status::succeeded);
  CHECK_FALSE(memory.find(key)->repaired_at);
}

TEST_CASE_METHOD(Crash,
                 "async guard: a resolver that says unknown, throws or overruns marks the "
                 "record outcome_unknown - run_once answers that verdict with no value and "
                 "no error") {
  std::atomic<bool> released{false};
  std::atomic<bool> finished{false};
  add_resolver();
  resolvers.add("SLOW",
                [&](const idem::Record&, const idem::ResolveContext&) {
                  while (!released)
                    std::this_thread::sleep_for(1ms);
                  finished = true;
                  return Resolution::happened(1);
                },
                {.time_limit = 50ms});
  int ran = 0;
  auto charge = [&]() -> net::awaitable<int> {
    ++ran;
    co_return 1;
  };
  struct Case {
    idem::Key key;
    std::string says;
  };
  const std::vector<Case> cases{
      Case{idem::Key{"PAY", "unknown-1"}, "the gateway says 503"},
      Case{idem::Key{"PAY", "throws-1"}, "gateway lookup failed"},
      Case{idem::Key{"SLOW", "overruns-1"}, "did not answer within 50 ms"}};
  for (const Case& c : cases) {
    INFO(c.key.id());
    crash(c.key);
    Events events;
    const auto t0 = Clock::now();
    const auto out = run(idem::async::run_once(store, c.key, "fp", charge, options(&events)));
    CHECK(Clock::now() - t0 < 2s);
    CHECK(out.verdict() == idem::Verdict::outcome_unknown);
    CHECK_FALSE(out);
    CHECK_FALSE(out.failed());
    REQUIRE(out.record());
    CHECK(out.record()->status == idem::Status::outcome_unknown);
    CHECK_THAT(out.record()->snapshot, Catch::Contains(c.says));
    CHECK(events.kinds.front() == idem::EventKind::outcome_unknown);
    // A later duplicate, with or without resolvers, neither runs nor replays.
    const auto again = run(idem::async::run_once(store, c.key, "fp", charge));
    CHECK(again.verdict() == idem::Verdict::outcome_unknown);
  }
  CHECK(ran == 0);
  released = true;
  for (int i = 0; i < 5000 && !finished; ++i)
    std::this_thread::sleep_for(1ms);
  CHECK(finished);
}

TEST_CASE_METHOD(Crash, "async guard: the loop keeps serving while a resolver sleeps") {
  resolvers.add("PAY", [](const idem::Record&, const idem::ResolveContext&) {
    std::this_thread::sleep_for(500ms);
    return Resolution::not_happened();
  });
  const idem::Key key{"PAY", "slow-1"};
  crash(key);
  int ticks = 0;
  Clock::duration longest_gap{};
  bool stop = false;
  int others = 0;
  std::optional<idem::Outcome<int>> resolved;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        auto last = Clock::now();
        while (!stop) {
          co_await idem::async::sleep_for(1ms);
          longest_gap = std::max(longest_gap, Clock::now() - last);
          last = Clock::now();
          ++ticks;
        }
      },
      net::detached);
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        resolved = co_await idem::async::run_once(
            store, key, "fp", [] { return 7; }, options());
        stop = true;
      },
      net::detached);
  // Other requests on the same loop finish while the resolver sleeps.
  for (int i = 0; i < 20; ++i) {
    net::co_spawn(
        io,
        [&, i]() -> net::awaitable<void> {
          co_await idem::async::sleep_for(std::chrono::milliseconds(10 * i));
          const auto out = co_await idem::async::run_once(
              store, {"PAY", "other-" + std::to_string(i)}, "fp", [] { return 1; }, options());
          if (out.acquired() && !stop) ++others;
        },
        net::detached);
  }
  io.run();
  REQUIRE(resolved);
  CHECK(resolved->acquired());
  CHECK(resolved->value() == 7);
  CHECK(others == 20);
  // A loop blocked by the resolver would have stood still for 500 ms.
  CHECK(ticks >= 50);
  CHECK(longest_gap < 250ms);
}

TEST_CASE_METHOD(Crash,
                 "async guard: a resolution whose repair is refused (the key moved on "
                 "meanwhile) answers in_progress with the current record") {
  const idem::Key key{"PAY", "moved-1"};
  std::atomic<bool> taken_over{false};
  resolvers.add("PAY", [&](const idem::Record&, const idem::ResolveContext&) {
    // While the resolver looks, this claim's lease runs out too and another worker takes over.
    clock.advance(2s);
    taken_over = memory.claim(key, "fp", {.lease = 1s}).verdict == idem::Verdict::acquired;
    return Resolution::happened(1);
  });
  crash(key);
  const auto guard = run(Guard::claim(store, key, "fp", options()));
  CHECK(taken_over);
  CHECK(guard.verdict() == idem::Verdict::in_progress);
  CHECK(guard.record().ticket.fence == 3);  // the other worker's claim
  CHECK(memory.find(key)->status == idem::Status::processing);
}

TEST_CASE_METHOD(Crash,
                 "async guard: no resolver is asked about a claim that did not follow a "
                 "crash, or whose biz_type has none") {
  add_resolver();
  // A fresh claim, a retry after a retryable failure, a crashed attempt of another biz_type.
  const auto fresh = run(idem::async::run_once(
      store, {"PAY", "unknown-2"}, "fp", [] { return 1; }, options()));
  CHECK(fresh.acquired());
  idem::Key retried{"PAY", "unknown-3"};
  const auto first = memory.claim(retried, "fp", {});
  memory.fail(retried, first.record.ticket, R"({"error":"x"})", true);
  const auto retry = run(idem::async::run_once(
      store, retried, "fp", [] { return 1; }, options()));
  CHECK(retry.acquired());
  const idem::Key other{"REFUND", "unknown-4"};
  crash(other);
  const auto crashed = run(idem::async::run_once(
      store, other, "fp", [] { return 1; }, options()));
  CHECK(crashed.acquired());
  CHECK(asked == 0);
}
