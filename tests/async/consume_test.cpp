// idem::async::consume on the memory store: the same answers and records as idem::consume, delivery
// after delivery; a check; a store outage waited out on a timer; cancellation; a redelivering
// queue drained by many coroutines on one loop thread.
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <catch2/catch.hpp>
#include <idem/async/consume.hpp>
#include <idem/async/inline_store.hpp>
#include <idem/async/offload_store.hpp>
#include <idem/consume.hpp>
#include <idem/memory_store.hpp>

#include "../support/batch_window.hpp"
#include "../support/loop.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;
using idem::Ack;
using idem::Verdict;
using nlohmann::json;

namespace {

const idem::Key order{"order.paid", "O-1001"};

// What a delivery's business does.
enum class Does {
  succeed,
  throw_error,
  fail_permanently,
  effect_unknown,
  return_unstorable,
  sql_error,        // a non-retryable StoreError of the business's own SQL
  transient_error,  // a retryable StoreError: propagates
};

json business(Does does) {
  switch (does) {
    case Does::succeed:
      return 7;
    case Does::throw_error:
      throw std::runtime_error("ledger unavailable");
    case Does::fail_permanently:
      throw idem::PermanentFailure({{"error", "account_closed"}});
    case Does::effect_unknown:
      throw idem::EffectUnknown("the ledger timed out after the credit was sent");
    case Does::return_unstorable:
      return std::string(idem::max_snapshot_bytes + 1, 'x');
    case Does::sql_error:
      throw idem::StoreError("Out of range value for column 'amount'", false);
    case Does::transient_error:
      throw idem::StoreError("Deadlock found when trying to get lock", true);
  }
  return nullptr;
}

// A delivery: its fingerprint and its business; `held`: another consumer claims the key first.
struct Delivery {
  Does does = Does::succeed;
  std::string fingerprint = "fp";
  bool held = false;
};

std::string describe(const Ack& ack) {
  return fmt::format("{} / {} / {} / {} ms", to_string(ack.action),
                     ack.verdict ? std::string(to_string(*ack.verdict)) : "none", ack.reason,
                     ack.delay.count());
}

std::string describe(const std::optional<idem::Record>& r) {
  if (!r) return "no record";
  return fmt::format("{} retryable={} attempts={} {}", to_string(r->status), r->retryable,
                     r->attempts, r->snapshot);
}

// Each delivery's ack (or the type of what it threw) and the record after it.
using Transcript = std::vector<std::string>;

struct Side {
  idem::ManualClock clock;
  idem::MemoryStore memory{[this] { return clock.now(); }};
  Transcript transcript;
  int runs = 0;
  void note(const std::string& answer) {
    transcript.push_back(answer + " => " + describe(memory.find(order)));
  }
};

std::string thrown_type() {
  try {
    throw;
  } catch (const idem::InvalidArgument&) {
    return "threw InvalidArgument";
  } catch (const idem::StoreError&) {
    return "threw StoreError";
  } catch (...) {
    return "threw something else";
  }
}

Transcript blocking(const std::vector<Delivery>& deliveries, const idem::Options& options) {
  Side side;
  for (const Delivery& d : deliveries) {
    if (d.held) (void)side.memory.claim(order, d.fingerprint, options);
    try {
      const Ack ack = idem::consume(
          side.memory, order, d.fingerprint,
          [&] {
            ++side.runs;
            return business(d.does);
          },
          options);
      side.note(describe(ack));
    } catch (...) {
      side.note(thrown_type());
    }
    side.clock.advance(1h);  // past any lease
  }
  side.note(fmt::format("ran {}", side.runs));
  return side.transcript;
}

Transcript coroutine(const std::vector<Delivery>& deliveries, const idem::Options& options) {
  Side side;
  idem::async::InlineStore store{side.memory};
  net::io_context io;
  for (const Delivery& d : deliveries) {
    if (d.held) (void)side.memory.claim(order, d.fingerprint, options);
    auto run = [&]() -> net::awaitable<json> {
      ++side.runs;
      co_await idem::async::sleep_for(1ms);
      co_return business(d.does);
    };
    try {
      const Ack ack =
          idem_test::run_on(io, idem::async::consume(store, order, d.fingerprint, run, options));
      side.note(describe(ack));
    } catch (...) {
      side.note(thrown_type());
    }
    side.clock.advance(1h);
  }
  side.note(fmt::format("ran {}", side.runs));
  return side.transcript;
}

}  // namespace

TEST_CASE("async consume: every delivery answered and recorded as idem::consume does") {
  idem::ConsumerPolicy policy{.max_attempts = 3, .first_delay = 2s, .max_delay = 1min};
  const idem::Options options{.lease = 30s, .ttl = 24h, .consumer = &policy};
  const std::map<std::string, std::vector<Delivery>> scenarios = {
      {"success, then its duplicate", {{Does::succeed}, {Does::succeed}}},
      {"an exception, then a success", {{Does::throw_error}, {Does::succeed}}},
      {"attempts exhausted, then redelivered",
       {{Does::throw_error}, {Does::throw_error}, {Does::throw_error}, {Does::succeed}}},
      {"a permanent failure, then its duplicate", {{Does::fail_permanently}, {Does::succeed}}},
      {"an unknown effect, then redelivered", {{Does::effect_unknown}, {Does::succeed}}},
      {"a result that cannot be stored", {{Does::return_unstorable}, {Does::succeed}}},
      {"the business's SQL refused", {{Does::sql_error}, {Does::succeed}}},
      {"a transient store failure under the business", {{Does::transient_error}, {Does::succeed}}},
      {"held by another consumer", {{.held = true}, {Does::succeed}}},
      {"another payload under the key", {{Does::succeed}, {.fingerprint = "fp-other"}}},
  };
  for (const auto& [name, deliveries] : scenarios) {
    INFO(name);
    const Transcript expected = blocking(deliveries, options);
    const Transcript got = coroutine(deliveries, options);
    CHECK(got == expected);
  }
}

TEST_CASE("async consume: plain and coroutine businesses, void or a value") {
  idem::MemoryStore memory;
  idem::async::InlineStore store{memory};
  net::io_context io;
  int runs = 0;
  auto plain_void = [&] { ++runs; };
  auto coro_void = [&]() -> net::awaitable<void> {
    ++runs;
    co_return;
  };
  auto plain_value = [&] {
    ++runs;
    return json{{"credited", 5}};
  };
  CHECK(idem_test::run_on(io, idem::async::consume(store, {"A", "1"}, "fp", plain_void)) ==
        Ack::commit);
  CHECK(idem_test::run_on(io, idem::async::consume(store, {"A", "2"}, "fp", coro_void)) ==
        Ack::commit);
  CHECK(idem_test::run_on(io, idem::async::consume(store, {"A", "3"}, "fp", plain_value)) ==
        Ack::commit);
  CHECK(runs == 3);
  CHECK(memory.find({"A", "1"})->snapshot == "null");
  CHECK(memory.find({"A", "3"})->snapshot == R"({"credited":5})");
}

TEST_CASE("async consume: a message failing its check is dead-lettered and claims nothing") {
  idem::MemoryStore memory;
  idem::async::InlineStore store{memory};
  net::io_context io;
  int runs = 0;
  auto forged = []() -> net::awaitable<void> {
    co_await idem::async::sleep_for(1ms);
    throw idem::InvalidMessage("bad signature");
  };
  const Ack ack =
      idem_test::run_on(io, idem::async::consume(store, order, "fp", forged, [&] { ++runs; }));
  CHECK(ack == Ack::dead_letter);
  CHECK_FALSE(ack.verdict);
  CHECK(ack.reason == "bad signature");
  CHECK(runs == 0);
  CHECK_FALSE(memory.find(order));
  // A genuine message then runs.
  CHECK(idem_test::run_on(io, idem::async::consume(
                                  store, order, "fp", [] {}, [&] { ++runs; })) == Ack::commit);
  CHECK(runs == 1);
}

namespace {

// A memory store whose first `outage` claims fail as a restarting database's would.
struct RestartingStore {
  idem::MemoryStore memory;
  int outage = 0;
  int claims = 0;

  idem::ClaimResult claim(const idem::Key& key, std::string_view fp, const idem::Options& o) {
    if (++claims <= outage) throw idem::StoreError("server is restarting", true);
    return memory.claim(key, fp, o);
  }
  void complete(const idem::Key& k, const idem::Ticket& t, std::string_view s) {
    memory.complete(k, t, s);
  }
  void fail(const idem::Key& k, const idem::Ticket& t, std::string_view e, bool r) {
    memory.fail(k, t, e, r);
  }
  std::optional<idem::Record> find(const idem::Key& k) { return memory.find(k); }
  std::size_t purge_expired(std::size_t b, std::size_t m) { return memory.purge_expired(b, m); }
  std::size_t release_stale(std::size_t b) { return memory.release_stale(b); }
};

}  // namespace

TEST_CASE("async consume: a store outage is waited out on a timer while the loop goes on") {
  RestartingStore restarting;
  restarting.outage = 3;
  idem::async::InlineStore store{restarting};
  net::io_context io;
  idem::ConsumerPolicy policy{.store_outage = 5s};
  int ticks = 0;
  bool done = false;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        while (!done) {
          co_await idem::async::sleep_for(5ms);
          ++ticks;
        }
      },
      net::detached);
  int runs = 0;
  const Ack ack = idem_test::run_on(io, [&]() -> net::awaitable<Ack> {
    const Ack a =
        co_await idem::async::consume(store, order, "fp", [&] { ++runs; }, {.consumer = &policy});
    done = true;
    co_return a;
  }());
  CHECK(ack == Ack::commit);
  CHECK(runs == 1);
  CHECK(restarting.claims == 4);
  // The pauses (50 + 100 + 200 ms) were spent on the loop's timer: the ticker kept ticking.
  CHECK(ticks >= 10);

  SECTION("longer than store_outage: thrown, nothing ran") {
    RestartingStore down;
    down.outage = 1000;
    idem::async::InlineStore down_store{down};
    idem::ConsumerPolicy brief{.store_outage = 120ms};
    CHECK_THROWS_AS(
        idem_test::run_on(io, idem::async::consume(down_store, order, "fp", [&] { ++runs; },
                                                   {.consumer = &brief})),
        idem::StoreError);
    CHECK(runs == 1);
    CHECK(down.claims >= 2);
  }
}

TEST_CASE(
    "async consume: a consume cancelled in its business releases the key before it "
    "completes, and the redelivery runs it") {
  using namespace net::experimental::awaitable_operators;
  idem::MemoryStore memory;
  idem::async::InlineStore store{memory};
  net::io_context io;
  int runs = 0;
  int finished = 0;
  auto slow = [&]() -> net::awaitable<void> {
    ++runs;
    co_await idem::async::sleep_for(200ms);
    ++finished;
  };
  std::optional<idem::Record> right_after;
  (void)idem_test::run_on(io, [&]() -> net::awaitable<bool> {
    net::steady_timer timer(co_await net::this_coro::executor, 5ms);
    const auto first = co_await (idem::async::consume(store, order, "fp", slow) ||
                                 timer.async_wait(net::use_awaitable));
    CHECK(first.index() == 1);
    right_after = memory.find(order);
    co_return true;
  }());
  REQUIRE(right_after);
  CHECK(right_after->status == idem::Status::failed);
  CHECK(right_after->retryable);
  CHECK(finished == 0);
  auto quick = [&] { ++runs; };
  CHECK(idem_test::run_on(io, idem::async::consume(store, order, "fp", quick)) == Ack::commit);
  CHECK(runs == 2);
}

TEST_CASE(
    "async consume: a redelivering queue drained by many coroutines on one loop runs each "
    "key once",
    "[race]") {
  // 1,000 messages for 880 keys (12% duplicates), 64 consumers on one loop thread, a business
  // that waits on a timer (so consumers interleave inside it) and fails one run in ten: a
  // retry_later message goes back to the queue, as a broker redelivers it.
  idem::MemoryStore memory;
  net::thread_pool blocking_calls{2};
  idem::async::OffloadStore store{memory, blocking_calls.get_executor()};
  net::io_context io;
  std::deque<int> queue;
  for (int m = 0; m < 1000; ++m)
    queue.push_back(m < 880 ? m : m % 880);
  std::map<int, int> succeeded;
  int runs = 0;
  int redelivered = 0;
  std::vector<std::string> errors;
  for (int consumer = 0; consumer < 64; ++consumer) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          while (!queue.empty()) {
            const int k = queue.front();
            queue.pop_front();
            auto apply = [&]() -> net::awaitable<void> {
              const int run = ++runs;
              co_await idem::async::sleep_for(1ms);
              if (run % 10 == 0) throw std::runtime_error("ledger busy");
              ++succeeded[k];
            };
            try {
              const Ack ack =
                  co_await idem::async::consume(store, {"credit", std::to_string(k)}, "fp", apply);
              if (ack == Ack::retry_later) {
                ++redelivered;
                queue.push_back(k);
                co_await idem::async::sleep_for(2ms);
              }
            } catch (const std::exception& e) {
              errors.push_back(e.what());
            }
          }
        },
        net::detached);
  }
  io.run();
  blocking_calls.join();
  CHECK(errors.empty());
  CHECK(succeeded.size() == 880);
  int twice = 0;
  for (const auto& [k, n] : succeeded)
    twice += n > 1 ? 1 : 0;
  CHECK(twice == 0);
  CHECK(redelivered > 0);
}

TEST_CASE("async consume_batch: each message gets consume's answer") {
  idem::MemoryStore memory;
  idem::async::InlineStore store{memory};
  net::io_context io;
  auto consume = [&](const idem::Key& key, std::string fp) {
    return idem_test::run_on(io, idem::async::consume(store, key, std::move(fp), [] {}));
  };
  // Stored before the batch: O-1 succeeded, O-2 in progress elsewhere, O-3 used with payload a.
  CHECK(consume({"order.paid", "O-1"}, "fp") == Ack::commit);
  REQUIRE(memory.claim({"order.paid", "O-2"}, "fp", {}).verdict == Verdict::acquired);
  CHECK(consume({"order.paid", "O-3"}, "a") == Ack::commit);

  const std::vector<idem::ClaimRequest> batch{
      {{"order.paid", "O-1"}, "fp"},  // 0 replay
      {{"order.paid", "O-2"}, "fp"},  // 1 in progress
      {{"order.paid", "O-3"}, "b"},   // 2 conflict
      {{"order.paid", "O-4"}, "fp"},  // 3 runs
      {{"order.paid", "O-5"}, "fp"},  // 4 runs and throws
      {{"order.paid", "O-6"}, "fp"},  // 5 runs, permanent failure
      {{"order.paid", "O-4"}, "fp"},  // 6 repeat of 3 in the same batch
  };
  std::vector<std::size_t> ran;
  auto apply = [&](std::size_t i) -> net::awaitable<void> {
    ran.push_back(i);
    co_await idem::async::sleep_for(1ms);
    if (i == 4) throw std::runtime_error("ledger unavailable");
    if (i == 5) throw idem::PermanentFailure({{"error", "account_closed"}});
  };
  const auto acks = idem_test::run_on(io, idem::async::consume_batch(store, batch, apply));
  REQUIRE(acks.size() == batch.size());
  CHECK(ran == std::vector<std::size_t>{3, 4, 5});
  CHECK((acks[0] == Ack::commit && acks[0].verdict == Verdict::replayed));
  CHECK((acks[1] == Ack::retry_later && acks[1].verdict == Verdict::in_progress));
  CHECK((acks[2] == Ack::dead_letter && acks[2].verdict == Verdict::conflict));
  CHECK((acks[3] == Ack::commit && acks[3].verdict == Verdict::acquired));
  CHECK((acks[4] == Ack::retry_later && acks[4].verdict == Verdict::acquired));
  CHECK(acks[4].reason == "ledger unavailable");
  CHECK((acks[5] == Ack::commit && acks[5].verdict == Verdict::acquired));
  CHECK((acks[6] == Ack::retry_later && acks[6].verdict == Verdict::in_progress));
  CHECK(memory.find({"order.paid", "O-4"})->status == idem::Status::succeeded);
  CHECK(memory.find({"order.paid", "O-5"})->retryable);

  SECTION("a bad message refuses the whole batch before writing") {
    const std::vector<idem::ClaimRequest> bad{{{"order.paid", "O-7"}, "fp"},
                                              {{"order.paid", "O-8"}, "bad fp"}};
    CHECK_THROWS_AS(idem_test::run_on(io, idem::async::consume_batch(store, bad, apply)),
                    idem::InvalidArgument);
    CHECK_FALSE(memory.find({"order.paid", "O-7"}));
  }
}

TEST_CASE(
    "async consume_batch: a message reached after half its lease is released, not run, so a "
    "consumer that took its expired claim over is the only one to run it") {
  idem_test::BatchWindowCase c;
  idem::async::InlineStore store{c.memory};
  net::io_context io;
  auto apply = [&](std::size_t i) -> net::awaitable<void> {
    if (!c.ran(i)) co_return;
    co_await idem::async::sleep_for(c.past_half);
    c.overtake();
  };
  c.check_first(
      idem_test::run_on(io, idem::async::consume_batch(store, c.batch, apply, c.options)));
  c.check_redelivered(
      idem_test::run_on(io, idem::async::consume_batch(store, c.batch, apply, c.options)));
}

TEST_CASE(
    "async consume_batch: cancelled mid-batch, the messages not yet run are released "
    "before it completes, and the redelivered batch runs each once") {
  using namespace net::experimental::awaitable_operators;
  idem::MemoryStore memory;
  net::thread_pool blocking_calls{2};
  idem::async::OffloadStore store{memory, blocking_calls.get_executor()};
  net::io_context io;
  std::vector<idem::ClaimRequest> batch;
  for (int i = 0; i < 20; ++i)
    batch.push_back({{"order.paid", "B-" + std::to_string(i)}, "fp"});
  std::map<std::size_t, int> applied;
  auto apply = [&](std::size_t i) -> net::awaitable<void> {
    co_await idem::async::sleep_for(2ms);
    ++applied[i];
  };
  int processing_after = 0;
  (void)idem_test::run_on(io, [&]() -> net::awaitable<bool> {
    net::steady_timer timer(co_await net::this_coro::executor, 15ms);
    const auto first = co_await (idem::async::consume_batch(store, batch, apply) ||
                                 timer.async_wait(net::use_awaitable));
    CHECK(first.index() == 1);
    for (const auto& m : batch)
      processing_after += memory.find(m.key)->status == idem::Status::processing ? 1 : 0;
    co_return true;
  }());
  CHECK(processing_after == 0);
  CHECK(applied.size() < batch.size());
  const auto acks = idem_test::run_on(io, idem::async::consume_batch(store, batch, apply));
  for (const Ack& ack : acks)
    CHECK(ack == Ack::commit);
  CHECK(applied.size() == batch.size());
  for (const auto& [i, n] : applied)
    CHECK(n == 1);
  blocking_calls.join();
}
