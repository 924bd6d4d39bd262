// idem::async::Attempt: a business made of steps, each step's result kept with the key; a
// claim that takes over a crashed attempt (a ManualClock past the lease) returns the kept
// results without running those steps, and runs only the unfinished ones; the crashed
// attempt's late writes are fenced.
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/idem.hpp>

#include "../support/loop.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct Steps {
  idem::ManualClock clock;
  idem::MemoryStore memory{[this] { return clock.now(); }};
  using Store = idem::async::InlineStore<idem::MemoryStore>;
  Store store{memory};
  net::io_context io;
  int reserved = 0, charged = 0, shipped = 0;

  // Three steps: a plain function, a coroutine, a plain function.
  net::awaitable<json> business(idem::async::Attempt<Store>& attempt) {
    const std::string hold = co_await attempt.step("reserve", [&] {
      ++reserved;
      return std::string("hold-1");
    });
    const json charge = co_await attempt.step("charge", [&]() -> net::awaitable<json> {
      ++charged;
      co_await idem::async::sleep_for(1ms);
      co_return json{{"charge", "ch_1"}, {"key", attempt.step_key("charge")}};
    });
    const int parcel = co_await attempt.step("ship", [&] {
      ++shipped;
      return 42;
    });
    co_return json{{"hold", hold}, {"charge", charge}, {"parcel", parcel}};
  }

  template <class T>
  T run(net::awaitable<T> a) {
    return idem_test::run_on(io, std::move(a));
  }
};

}  // namespace

TEST_CASE_METHOD(Steps, "async attempt: each step runs once and its result is kept with the key") {
  const idem::Key key{"ORDER", "O-1"};
  bool after_crash = true;
  std::uint32_t number = 0;
  const auto out = run(idem::async::run_once(
      store, key, "fp", [&](idem::async::Attempt<Store>& attempt) -> net::awaitable<json> {
        after_crash = attempt.after_crash();
        number = attempt.number();
        CHECK(attempt.key() == key);
        co_return co_await business(attempt);
      }));
  REQUIRE(out);
  CHECK(out.acquired());
  CHECK(out.value()["parcel"] == 42);
  CHECK(out.value()["charge"]["key"] == idem::step_key(key, "charge"));
  CHECK_FALSE(after_crash);
  CHECK(number == 1);
  CHECK(reserved == 1);
  CHECK(charged == 1);
  CHECK(shipped == 1);
  const json points = json::parse(memory.find(key)->recovery_points);
  CHECK(points["reserve"] == "hold-1");
  CHECK(points["charge"]["charge"] == "ch_1");
  CHECK(points["ship"] == 42);
}

TEST_CASE_METHOD(Steps,
                 "async attempt: a claim that takes over a crashed attempt resumes with its "
                 "kept steps and runs only the unfinished ones") {
  const idem::Key key{"ORDER", "O-2"};
  std::optional<idem::Outcome<json>> resumed;
  bool late_step_fenced = false;
  bool resumed_after_crash = false;
  std::uint32_t resumed_number = 0;
  run([&]() -> net::awaitable<int> {
    // The first worker keeps two steps, then stalls past its lease: presumed dead.
    auto first =
        co_await idem::async::IdempotencyGuard<Store>::claim(store, key, "fp", {.lease = 1s});
    REQUIRE(first.acquired());
    auto attempt = first.attempt();
    co_await attempt.step("reserve", [&] {
      ++reserved;
      return std::string("hold-1");
    });
    co_await attempt.step("charge", [&] {
      ++charged;
      return json{{"charge", "ch_1"}, {"key", attempt.step_key("charge")}};
    });
    clock.advance(2s);

    // A duplicate takes the attempt over and finishes it.
    resumed = co_await idem::async::run_once(
        store, key, "fp",
        [&](idem::async::Attempt<Store>& again) -> net::awaitable<json> {
          resumed_after_crash = again.after_crash();
          resumed_number = again.number();
          co_return co_await business(again);
        },
        {.lease = 1s});

    // The first worker wakes up: its next step is fenced off.
    try {
      co_await attempt.step("ship", [&] {
        ++shipped;
        return 0;
      });
    } catch (const idem::LeaseLost&) {
      late_step_fenced = true;
    }
    co_return 0;  // its guard is let go: the abandon is fenced off too
  }());
  REQUIRE(resumed);
  REQUIRE(*resumed);
  CHECK(resumed->acquired());
  CHECK(resumed_after_crash);
  CHECK(resumed_number == 2);
  // The kept results came back as they were kept; only "ship" ran again, once.
  CHECK(resumed->value()["hold"] == "hold-1");
  CHECK(resumed->value()["charge"]["key"] == idem::step_key(key, "charge"));
  CHECK(reserved == 1);
  CHECK(charged == 1);
  CHECK(shipped == 2);  // the resumed attempt's run, and the fenced one's (its result not kept)
  CHECK(late_step_fenced);
  const auto stored = memory.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::succeeded);
  CHECK(json::parse(stored->recovery_points)["ship"] == 42);
}

TEST_CASE_METHOD(Steps,
                 "async attempt: a step that throws keeps nothing - the retry runs it again "
                 "and keeps the earlier steps") {
  const idem::Key key{"ORDER", "O-3"};
  bool fail = true;
  auto flaky = [&](idem::async::Attempt<Store>& attempt) -> net::awaitable<int> {
    co_await attempt.step("reserve", [&] {
      ++reserved;
      return 1;
    });
    co_return co_await attempt.step("charge", [&]() -> net::awaitable<int> {
      ++charged;
      if (fail) throw std::runtime_error("gateway timeout");
      co_return 2;
    });
  };
  CHECK_THROWS_WITH(run(idem::async::run_once(store, key, "fp", flaky)), "gateway timeout");
  CHECK(json::parse(memory.find(key)->recovery_points) == json{{"reserve", 1}});
  fail = false;
  const auto retry = run(idem::async::run_once(store, key, "fp", flaky));
  CHECK(retry.acquired());
  CHECK(retry.value() == 2);
  CHECK(reserved == 1);
  CHECK(charged == 2);
}

TEST_CASE_METHOD(Steps,
                 "async attempt: a kept result that does not decode as the step's type is "
                 "CorruptRecord - a bad step name InvalidArgument - a closed guard UsageError") {
  const idem::Key key{"ORDER", "O-4"};
  run([&]() -> net::awaitable<int> {
    auto guard = co_await idem::async::IdempotencyGuard<Store>::claim(store, key, "fp");
    auto attempt = guard.attempt();
    co_await attempt.step("reserve", [] { return std::string("hold"); });
    bool corrupt = false, invalid = false, closed = false;
    try {
      co_await attempt.step("reserve", [] { return 1; });
    } catch (const idem::CorruptRecord&) {
      corrupt = true;
    }
    try {
      co_await attempt.step("no spaces", [] { return 1; });
    } catch (const idem::InvalidArgument&) {
      invalid = true;
    }
    co_await guard.commit(1);
    try {
      co_await attempt.step("late", [] { return 1; });
    } catch (const idem::UsageError&) {
      closed = true;
    }
    CHECK(corrupt);
    CHECK(invalid);
    CHECK(closed);
    co_return 0;
  }());
}
