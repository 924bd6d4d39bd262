// idem::async::Janitor on MemoryStore (through InlineStore): each round does what the blocking
// Janitor's does from the same records (purge, stale gauge, resolver pass, fenced release,
// failures by job), counts the same and leaves the same records; run() rounds on a timer until
// cancelled, and the cancellation is not a failure; a slow resolver leaves the loop serving.
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async/inline_store.hpp>
#include <idem/async/janitor.hpp>
#include <idem/janitor.hpp>
#include <idem/memory_store.hpp>
#include <nlohmann/json.hpp>

#include "../support/forwarding_store.hpp"
#include "../support/loop.hpp"

using namespace std::chrono_literals;
namespace net = idem::async::net;
using idem_test::run_on;

namespace {

// One store with every kind of record a round meets, at a time of its own.
struct Records {
  idem::ManualClock clock;
  idem::MemoryStore store{[this] { return clock.now(); }};

  Records() {
    for (int i = 0; i < 25; ++i)  // expired: purged in three batches of 10
      store.claim(idem::Key{"OLD", "k" + std::to_string(i)}, "", {.lease = 1s, .ttl = 1s});
    const idem::Options dies{.lease = 1s, .ttl = 1h};
    for (const char* id : {"paid", "free", "dunno"})
      store.claim(idem::Key{"PAY", id}, "", dies);
    store.claim(idem::Key{"MAIL", "m1"}, "", dies);
    store.claim(idem::Key{"PAY", "live"}, "", {.lease = 1h, .ttl = 2h});
    clock.advance(2s);
  }

  // Every record left, as a line each, in key order.
  std::string text() {
    std::string out;
    for (const idem::Record& r : store.list({.limit = 1000})) {
      out += std::string(r.key.biz_type()) + "/" + std::string(r.key.id()) + " " +
             std::to_string(static_cast<int>(r.status)) + " " + r.snapshot + " " + r.repair_reason +
             "\n";
    }
    return out;
  }
};

void add_payment_resolver(idem::Resolvers& resolvers) {
  resolvers.add("PAY", [](const idem::Record& r, const idem::ResolveContext&) {
    if (r.key.id() == "paid") return idem::Resolution::happened(nlohmann::json{{"charge", "c1"}});
    if (r.key.id() == "free") return idem::Resolution::not_happened();
    return idem::Resolution::unknown("the gateway does not know yet");
  });
}

// One round of `janitor` run on `io` to its end.
template <class J>
void round_on(net::io_context& io, J& janitor) {
  run_on(io, [](J& j) -> net::awaitable<bool> {
    co_await j.run_once();
    co_return true;
  }(janitor));
}

std::string describe(const idem::JanitorStats& s) {
  return fmt::format(
      "rounds {} purged {} released {} errors {} retryable {} happened {} not_happened {} "
      "unknown {} outcome_unknown {} stale {} unfinished {}",
      s.rounds, s.purged, s.released, s.errors, s.retryable_errors, s.resolved_happened,
      s.resolved_not_happened, s.resolved_unknown, s.outcome_unknown, s.stale_claims,
      s.purge_unfinished);
}

// The metrics without the last round's time, which differs between any two rounds.
std::string without_time(std::string text) {
  const std::string sample = "\nidem_janitor_last_round_timestamp_seconds ";
  const auto at = text.find(sample);
  if (at != std::string::npos) text.erase(at + sample.size(), text.find('\n', at + 1) - at);
  return text;
}

// A store whose purge fails retryably and whose release fails permanently.
struct BrokenJobs : idem_test::ForwardingStore {
  std::size_t purge_expired(std::size_t, std::size_t) {
    throw idem::StoreError("purge: the database went away", true);
  }
  std::size_t release_stale(std::size_t) {
    throw idem::CorruptRecord("release: a row idem cannot read");
  }
};

}  // namespace

TEST_CASE("async janitor: a round does, counts and leaves what the blocking Janitor's does") {
  idem::Resolvers resolvers;
  add_payment_resolver(resolvers);
  const bool with_resolvers = GENERATE(false, true);
  const idem::JanitorParams base{.interval = 1h,
                                 .purge_batch = 10,
                                 .purge_max_batches = 2,
                                 .purge_pause = 1ms,
                                 .resolvers = with_resolvers ? &resolvers : nullptr};
  Records blocking_records;
  Records async_records;
  idem::Metrics blocking_metrics;
  idem::Metrics async_metrics;
  idem::JanitorParams blocking_params = base;
  blocking_params.metrics = &blocking_metrics;
  idem::JanitorParams async_params = base;
  async_params.metrics = &async_metrics;

  idem::Janitor blocking(blocking_records.store, blocking_params);
  for (int i = 0; i < 5000 && blocking.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);  // its first round, on its thread
  REQUIRE(blocking.stats().rounds == 1);
  blocking.run_once();  // the rest of the purge

  idem::async::InlineStore store(async_records.store);
  idem::async::Janitor janitor(store, async_params);
  net::io_context io;
  round_on(io, janitor);
  round_on(io, janitor);

  INFO(blocking_records.text());
  CHECK(describe(janitor.stats()) == describe(blocking.stats()));
  CHECK(async_records.text() == blocking_records.text());
  CHECK(without_time(async_metrics.render()) == without_time(blocking_metrics.render()));
  CHECK(janitor.stats().purged == 25);
  CHECK(janitor.stats().purge_unfinished == 1);  // the first round stopped at two batches
  CHECK(janitor.stats().released == (with_resolvers ? 1 : 4));
  CHECK(janitor.stats().resolved_happened == (with_resolvers ? 1 : 0));
}

TEST_CASE("async janitor: a failed job is counted as the blocking Janitor counts it") {
  Records blocking_records;
  Records async_records;
  BrokenJobs blocking_store{{blocking_records.store}};
  BrokenJobs async_inner{{async_records.store}};
  idem::Janitor blocking(blocking_store, {.interval = 1h});
  for (int i = 0; i < 5000 && blocking.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(blocking.stats().rounds == 1);
  idem::async::InlineStore store(async_inner);
  idem::async::Janitor janitor(store, {.interval = 1h});
  net::io_context io;
  round_on(io, janitor);
  CHECK(describe(janitor.stats()) == describe(blocking.stats()));
  CHECK(janitor.stats().errors == 2);
  CHECK(janitor.stats().retryable_errors == 1);
}

TEST_CASE("async janitor: run() rounds on a timer until cancelled, which is no failure") {
  Records records;
  idem::async::InlineStore store(records.store);
  idem::async::Janitor janitor(store, {.interval = 5ms, .purge_pause = 0ms});
  net::io_context io;
  net::cancellation_signal stop;
  std::exception_ptr ended;
  net::co_spawn(io, janitor.run(),
                net::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) { ended = e; }));
  net::steady_timer later(io);
  net::co_spawn(
      io,
      [](net::steady_timer& timer,
         idem::async::Janitor<idem::async::InlineStore<idem::MemoryStore>>& j,
         net::cancellation_signal& signal) -> net::awaitable<void> {
        while (j.stats().rounds < 3) {
          timer.expires_after(1ms);
          co_await timer.async_wait(net::use_awaitable);
        }
        signal.emit(net::cancellation_type::terminal);
      }(later, janitor, stop),
      net::detached);
  io.run();  // ends: the cancelled Janitor leaves no work behind
  REQUIRE(ended);
  CHECK_THROWS_AS(std::rethrow_exception(ended), boost::system::system_error);
  CHECK(janitor.stats().rounds >= 3);
  CHECK(janitor.stats().errors == 0);
  CHECK(janitor.stats().purged == 25);
}

TEST_CASE("async janitor: the loop keeps serving while a resolver takes its time") {
  Records records;
  idem::Resolvers resolvers;
  std::atomic<bool> asking{false};
  resolvers.add("PAY", [&](const idem::Record&, const idem::ResolveContext&) {
    asking = true;
    std::this_thread::sleep_for(50ms);  // a slow gateway, on the resolver call's own thread
    asking = false;
    return idem::Resolution::not_happened();
  });
  idem::async::InlineStore store(records.store);
  idem::async::Janitor janitor(store, {.interval = 1h, .resolvers = &resolvers});
  net::io_context io;
  int ticks_while_asking = 0;
  bool done = false;
  net::co_spawn(
      io,
      [](idem::async::Janitor<idem::async::InlineStore<idem::MemoryStore>>& j,
         bool& finished) -> net::awaitable<void> {
        co_await j.run_once();
        finished = true;
      }(janitor, done),
      net::detached);
  net::co_spawn(
      io,
      [](bool& finished, std::atomic<bool>& busy, int& ticks) -> net::awaitable<void> {
        net::steady_timer timer(co_await net::this_coro::executor);
        while (!finished) {
          timer.expires_after(1ms);
          co_await timer.async_wait(net::use_awaitable);
          if (busy) ++ticks;
        }
      }(done, asking, ticks_while_asking),
      net::detached);
  io.run();
  CHECK(done);
  CHECK(janitor.stats().resolved_not_happened == 3);  // PAY's stale claims: paid, free, dunno
  CHECK(ticks_while_asking > 0);
}
