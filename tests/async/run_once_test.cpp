// idem::async::run_once and idem::async::IdempotencyGuard on a MemoryStore through InlineStore: the
// same outcomes as the blocking API, Options::wait on a timer, cancellation, and many coroutines
// racing on one loop thread.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/idem.hpp>

#include "../support/loop.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;
using namespace net::experimental::awaitable_operators;
using nlohmann::json;

namespace {

struct Loop {
  idem::MemoryStore memory;
  idem::async::InlineStore<idem::MemoryStore> store{memory};
  net::io_context io;

  template <class T>
  T run(net::awaitable<T> a) {
    return idem_test::run_on(io, std::move(a));
  }
};

net::awaitable<int> charge(int amount, std::chrono::milliseconds takes) {
  co_await idem::async::sleep_for(takes);
  co_return amount;
}

}  // namespace

TEST_CASE_METHOD(Loop, "async run_once: runs once, replays to duplicates, reports a conflict") {
  const idem::Key key{"PAY", "A-1"};
  int ran = 0;
  auto pay = [&]() -> net::awaitable<int> {
    ++ran;
    co_return co_await charge(299, 1ms);
  };
  const auto first = run(idem::async::run_once(store, key, "fp", pay));
  REQUIRE(first);
  CHECK(first.acquired());
  CHECK(first.value() == 299);
  const auto again = run(idem::async::run_once(store, key, "fp", pay));
  REQUIRE(again);
  CHECK(again.replayed());
  CHECK(again.value() == 299);
  CHECK(ran == 1);
  const auto other = run(idem::async::run_once(store, key, "other", pay));
  CHECK_FALSE(other);
  CHECK(other.verdict() == idem::Verdict::conflict);
  // A plain function works too, and the stored record is the blocking API's.
  const auto plain = run(idem::async::run_once(store, idem::Key{"PAY", "A-2"}, "", [] {
    return json{{"ok", true}};
  }));
  CHECK(plain.value() == json{{"ok", true}});
  CHECK(memory.find(key)->status == idem::Status::succeeded);
}

TEST_CASE_METHOD(Loop, "async run_once: EffectUnknown leaves the record outcome_unknown") {
  const idem::Key key{"PAY", "A-unknown"};
  int ran = 0;
  auto timed_out = [&]() -> net::awaitable<int> {
    ++ran;
    co_await charge(299, 1ms);
    throw idem::EffectUnknown("the gateway timed out after the charge was sent");
  };
  const auto first = run(idem::async::run_once(store, key, "fp", timed_out));
  CHECK(first.verdict() == idem::Verdict::outcome_unknown);
  CHECK_FALSE(first.has_value());
  CHECK_FALSE(first.failed());
  const auto stored = memory.find(key);
  REQUIRE(stored.has_value());
  CHECK(stored->status == idem::Status::outcome_unknown);
  CHECK(stored->ticket.fence == 2);
  CHECK(stored->snapshot.find("idem.effect_unknown") != std::string::npos);
  const auto again = run(idem::async::run_once(store, key, "fp", timed_out));
  CHECK(again.verdict() == idem::Verdict::outcome_unknown);
  CHECK(ran == 1);
}

TEST_CASE_METHOD(Loop,
                 "async run_once: an exception records a retryable failure, a "
                 "PermanentFailure is replayed") {
  const idem::Key key{"PAY", "A-3"};
  auto broken = []() -> net::awaitable<int> {
    co_await idem::async::sleep_for(1ms);
    throw std::runtime_error("gateway down");
  };
  CHECK_THROWS_WITH(run(idem::async::run_once(store, key, "fp", broken)), "gateway down");
  const auto stored = memory.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::failed);
  CHECK(stored->retryable);

  auto declined = []() -> net::awaitable<int> {
    throw idem::PermanentFailure(json{{"code", "card_declined"}});
    co_return 0;
  };
  const auto out = run(idem::async::run_once(store, key, "fp", declined));
  CHECK(out.acquired());
  REQUIRE(out.failed());
  CHECK(out.error() == json{{"code", "card_declined"}});
  const auto replay = run(idem::async::run_once(store, key, "fp", declined));
  CHECK(replay.replayed());
  CHECK(replay.error() == json{{"code", "card_declined"}});
}

TEST_CASE_METHOD(Loop,
                 "async guard: Options::wait turns an in-progress duplicate into a replay "
                 "without blocking the loop") {
  const idem::Key key{"PAY", "A-4"};
  int ticks = 0;
  auto ticker = [&]() -> net::awaitable<void> {
    for (int i = 0; i < 20; ++i) {
      co_await idem::async::sleep_for(5ms);
      ++ticks;
    }
  };
  auto slow = [&]() -> net::awaitable<int> { co_return co_await charge(7, 60ms); };
  std::optional<idem::Outcome<int>> first, duplicate;
  net::co_spawn(io, ticker(), net::detached);
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        first = co_await idem::async::run_once(store, key, "fp", slow);
      },
      net::detached);
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await idem::async::sleep_for(10ms);
        duplicate = co_await idem::async::run_once(store, key, "fp", slow, {.wait = 2s});
      },
      net::detached);
  io.run();
  REQUIRE(first);
  REQUIRE(duplicate);
  CHECK(first->acquired());
  CHECK(duplicate->replayed());
  CHECK(duplicate->value() == 7);
  CHECK(ticks == 20);  // the timers kept firing while the duplicate waited

  // Without a wait the duplicate answers in_progress at once.
  auto guard =
      run(idem::async::IdempotencyGuard<decltype(store)>::claim(store, {"PAY", "A-5"}, "fp"));
  REQUIRE(guard.acquired());
  auto busy =
      run(idem::async::IdempotencyGuard<decltype(store)>::claim(store, {"PAY", "A-5"}, "fp"));
  CHECK(busy.verdict() == idem::Verdict::in_progress);
  run([&]() -> net::awaitable<int> {
    co_await guard.commit(5);
    co_return 0;
  }());
  CHECK_THROWS_AS(run([&]() -> net::awaitable<int> {
                    co_await guard.commit(5);
                    co_return 0;
                  }()),
                  idem::UsageError);
}

TEST_CASE_METHOD(Loop,
                 "async guard: one destroyed without a result records a retryable failure "
                 "on its executor") {
  const idem::Key key{"PAY", "A-6"};
  run([&]() -> net::awaitable<int> {
    auto guard = co_await idem::async::IdempotencyGuard<decltype(store)>::claim(store, key, "fp");
    CHECK(guard.acquired());
    co_return 0;  // no commit: the destructor starts the recording
  }());
  const auto stored = memory.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::failed);
  CHECK(stored->retryable);
  CHECK(stored->snapshot.find("idem.abandoned") != std::string::npos);
}

TEST_CASE_METHOD(Loop,
                 "async run_once: a request cancelled by its timeout records a retryable "
                 "failure, and the next duplicate runs at once") {
  const idem::Key key{"PAY", "A-7"};
  int ran = 0;
  auto slow = [&]() -> net::awaitable<int> {
    ++ran;
    co_return co_await charge(1, 10s);
  };
  auto timed = [&]() -> net::awaitable<int> {
    net::steady_timer timeout(co_await net::this_coro::executor, 20ms);
    auto winner = co_await (idem::async::run_once(store, key, "fp", slow) ||
                            timeout.async_wait(net::use_awaitable));
    co_return static_cast<int>(winner.index());
  };
  const auto start = std::chrono::steady_clock::now();
  CHECK(run(timed()) == 1);  // the timeout won
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  const auto stored = memory.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::failed);
  CHECK(stored->retryable);
  auto quick = [&]() -> net::awaitable<int> {
    ++ran;
    co_return 2;
  };
  const auto retry = run(idem::async::run_once(store, key, "fp", quick));
  CHECK(retry.acquired());
  CHECK(retry.value() == 2);
  CHECK(ran == 2);
}

namespace {

struct Voucher {
  std::optional<std::string> code;
};
void to_json(json& j, const Voucher& v) {
  j = v.code.value();  // std::bad_optional_access for an empty optional
}
void from_json(const json& j, Voucher& v) {
  v.code = j.get<std::string>();
}

}  // namespace

TEST_CASE_METHOD(Loop,
                 "async run_once: a response whose to_json throws any exception is recorded as "
                 "permanent, never run again") {
  const idem::Key key{"PAY", "A-7b"};
  int ran = 0;
  auto issue = [&]() -> net::awaitable<Voucher> {
    ++ran;
    co_return Voucher{};
  };
  CHECK_THROWS_AS(run(idem::async::run_once(store, key, "fp", issue)), idem::InvalidArgument);
  const auto stored = memory.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::failed);
  CHECK_FALSE(stored->retryable);
  const auto again = run(idem::async::run_once(store, key, "fp", issue));
  CHECK(again.verdict() == idem::Verdict::replayed);
  REQUIRE(again.failed());
  CHECK(again.error()["error"] == "idem.unstorable_response");
  CHECK(ran == 1);
}

TEST_CASE_METHOD(Loop,
                 "async run_once: 1,000 coroutines at 12% duplicates on one loop thread run "
                 "each key once") {
  constexpr int keys = 880;
  std::vector<int> order;
  for (int k = 0; k < keys; ++k)
    order.push_back(k);
  std::mt19937 rng(7);
  while (order.size() < 1000)
    order.push_back(static_cast<int>(rng() % keys));
  std::shuffle(order.begin(), order.end(), rng);
  std::map<int, int> executions;
  int answered = 0;
  for (int k : order) {
    net::co_spawn(
        io,
        [&, k]() -> net::awaitable<void> {
          auto body = [&]() -> net::awaitable<int> {
            ++executions[k];
            co_return co_await charge(k, std::chrono::milliseconds(1 + k % 5));
          };
          const auto out = co_await idem::async::run_once(store, {"PAY", std::to_string(k)}, "fp",
                                                          body, {.wait = 5s});
          if (out && out.value() == k) ++answered;
        },
        net::detached);
  }
  io.run();
  CHECK(answered == 1000);
  CHECK(executions.size() == static_cast<std::size_t>(keys));
  for (const auto& [k, n] : executions)
    CHECK(n == 1);
}

TEST_CASE(
    "async run_once: cancelled while the resolver of a crashed attempt runs, it ends at "
    "once - the resolver's thread finishes and its answer settles the key for the next "
    "duplicate") {
  struct Case {
    std::string id;
    idem::Resolution answer;
  };
  const std::vector<Case> cases{{"happened", idem::Resolution::happened(json{{"charge", "ch_1"}})},
                                {"not_happened", idem::Resolution::not_happened()},
                                {"unknown", idem::Resolution::unknown("the gateway says 503")}};
  for (const Case& c : cases) {
    INFO(c.id);
    idem::ManualClock clock;
    idem::MemoryStore memory{[&clock] { return clock.now(); }};
    idem::async::InlineStore<idem::MemoryStore> store{memory};
    std::atomic<bool> finished{false};
    idem::Resolvers resolvers;
    resolvers.add("PAY", [&](const idem::Record&, const idem::ResolveContext&) {
      std::this_thread::sleep_for(300ms);
      finished = true;
      return c.answer;
    });
    const idem::Key key{"PAY", c.id};
    REQUIRE(memory.claim(key, "fp", {.lease = 1s}).verdict == idem::Verdict::acquired);
    clock.advance(2s);  // the worker died: its lease ran out

    net::io_context io;
    int ran = 0;
    auto business = [&] {
      ++ran;
      return json{{"charge", "ran"}};
    };
    const idem::Options options{.lease = 1s, .resolvers = &resolvers};
    std::optional<std::size_t> winner;
    std::chrono::steady_clock::duration cancelled_after{};
    const auto t0 = std::chrono::steady_clock::now();
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          net::steady_timer timeout(co_await net::this_coro::executor, 20ms);
          const auto first = co_await (idem::async::run_once(store, key, "fp", business, options) ||
                                       timeout.async_wait(net::use_awaitable));
          winner = first.index();
          cancelled_after = std::chrono::steady_clock::now() - t0;
        },
        net::detached);
    io.run();  // to its end: the resolver's thread, then the settling of its answer
    REQUIRE(winner);
    CHECK(*winner == 1);
    CHECK(cancelled_after < 250ms);
    CHECK(finished);
    CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
    CHECK(ran == 0);

    const auto stored = memory.find(key);
    REQUIRE(stored);
    CHECK(stored->ticket.fence == 3);  // the crashed claim, the cancelled one's, the repair
    // The next duplicate, at once (no lease to wait out) and with no resolver to ask.
    io.restart();
    const auto next = idem_test::run_on(io, idem::async::run_once(store, key, "fp", business));
    if (c.id == "happened") {
      CHECK(stored->status == idem::Status::succeeded);
      CHECK(next.replayed());
      CHECK(next.value() == json{{"charge", "ch_1"}});
      CHECK(ran == 0);
    } else if (c.id == "not_happened") {
      CHECK(stored->status == idem::Status::failed);
      CHECK(stored->retryable);
      CHECK(next.acquired());
      CHECK(next.value() == json{{"charge", "ran"}});
      CHECK(ran == 1);
    } else {
      CHECK(stored->status == idem::Status::outcome_unknown);
      CHECK(next.verdict() == idem::Verdict::outcome_unknown);
      CHECK(ran == 0);
    }
  }
}

namespace {

// Which context each key's events carried.
struct Contexts final : idem::Observer {
  std::mutex m;
  std::map<std::string, std::vector<std::string>> by_key;
  void on_event(const idem::Event& e) noexcept override {
    std::lock_guard lock(m);
    by_key[std::string(e.id)].emplace_back(e.context);
  }
};

}  // namespace

TEST_CASE_METHOD(Loop,
                 "async run_once: each request's events carry its own context while coroutines "
                 "interleave on one thread") {
  Contexts contexts;
  constexpr int requests = 50;
  for (int i = 0; i < requests; ++i) {
    net::co_spawn(
        io,
        [&, i]() -> net::awaitable<void> {
          const std::string context = "trace-" + std::to_string(i) + std::string(24, '0');
          auto body = [&]() -> net::awaitable<int> {
            co_return co_await charge(i, std::chrono::milliseconds(1 + (requests - i) % 7));
          };
          co_await idem::async::run_once(store, {"PAY", std::to_string(i)}, "fp", body,
                                         {.observer = &contexts, .context = context});
        },
        net::detached);
  }
  io.run();
  REQUIRE(contexts.by_key.size() == static_cast<std::size_t>(requests));
  for (const auto& [id, seen] : contexts.by_key) {
    INFO("key " << id);
    CHECK(seen == std::vector<std::string>(2, "trace-" + id + std::string(24, '0')));
  }
}
