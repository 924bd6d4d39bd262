// idem::Resolvers: the three answers, and the bounds that make a resolver safe to call from a
// claim: a throw or an overrun is unknown, the caller waits at most the time limit, and a hung
// lookup cannot pile threads up.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/idem.hpp>
#include <idem/memory_store.hpp>
#include <idem/resolver.hpp>
#include <idem/run_once.hpp>

using namespace std::chrono_literals;
using idem::Resolution;

namespace {

idem::Record record_of(std::string biz_type, std::string id) {
  return idem::backend::claim_record(idem::Key{std::move(biz_type), std::move(id)}, "owner", "",
                                     idem::system_now(), idem::Options{});
}

// A gate a resolver waits on until the test opens it (so an overrunning resolver ends before
// the test does).
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard lock(m);
      open = true;
    }
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("resolvers: each answer, with its snapshot") {
  idem::Resolvers resolvers;
  resolvers.add("PAY", [](const idem::Record& r, const idem::ResolveContext&) {
    if (r.key.id() == "paid") return Resolution::happened(nlohmann::json{{"charge", "ch_1"}});
    if (r.key.id() == "free") return Resolution::not_happened();
    return Resolution::unknown("the gateway says 503");
  });
  CHECK(resolvers.covers("PAY"));
  CHECK_FALSE(resolvers.covers("REFUND"));
  CHECK(resolvers.biz_types() == std::vector<std::string>{"PAY"});

  const Resolution paid = resolvers.resolve(record_of("PAY", "paid"));
  CHECK(paid.kind() == Resolution::Kind::happened);
  CHECK(nlohmann::json::parse(paid.snapshot()) == nlohmann::json{{"charge", "ch_1"}});
  CHECK(resolvers.resolve(record_of("PAY", "free")).kind() == Resolution::Kind::not_happened);
  const Resolution unknown = resolvers.resolve(record_of("PAY", "other"));
  CHECK(unknown.kind() == Resolution::Kind::unknown);
  CHECK(nlohmann::json::parse(unknown.snapshot())["detail"] == "the gateway says 503");
  // No resolver for the biz_type: unknown, never an invented answer.
  CHECK(resolvers.resolve(record_of("REFUND", "x")).kind() == Resolution::Kind::unknown);
}

TEST_CASE("resolvers: a resolver that throws is unknown, saying why") {
  idem::Resolvers resolvers;
  resolvers.add("PAY", [](const idem::Record&, const idem::ResolveContext&) -> Resolution {
    throw std::runtime_error("connection refused");
  });
  const Resolution r = resolvers.resolve(record_of("PAY", "1"));
  CHECK(r.kind() == Resolution::Kind::unknown);
  CHECK_THAT(r.snapshot(), Catch::Contains("connection refused"));
}

TEST_CASE(
    "resolvers: an overrunning resolver is unknown at its time limit - the caller waits no "
    "longer") {
  Gate gate;
  std::atomic<bool> finished{false};
  idem::Resolvers resolvers;
  std::chrono::steady_clock::time_point seen_deadline{};
  resolvers.add("PAY",
                [&](const idem::Record&, const idem::ResolveContext& ctx) {
                  seen_deadline = ctx.deadline;
                  gate.wait();
                  finished = true;
                  return Resolution::happened(1);
                },
                {.time_limit = 100ms});
  const auto t0 = std::chrono::steady_clock::now();
  const Resolution r = resolvers.resolve(record_of("PAY", "slow"));
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(r.kind() == Resolution::Kind::unknown);
  CHECK_THAT(r.snapshot(), Catch::Contains("100 ms"));
  CHECK(waited >= 100ms);
  CHECK(waited < 5s);
  gate.release();
  for (int i = 0; i < 5000 && !finished; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(finished);  // it ran to its end on its own thread; its late answer was dropped
  // Read once `finished` says that thread is done with it.
  CHECK(seen_deadline - t0 <= 110ms);  // the resolver was told when the caller stops waiting
}

TEST_CASE("resolvers: hung calls up to max_running, then unknown at once") {
  Gate gate;
  std::atomic<int> running{0};
  idem::Resolvers resolvers({.max_running = 2});
  resolvers.add("PAY",
                [&](const idem::Record&, const idem::ResolveContext&) {
                  ++running;
                  gate.wait();
                  --running;
                  return Resolution::not_happened();
                },
                {.time_limit = 20ms});
  CHECK(resolvers.resolve(record_of("PAY", "1")).kind() == Resolution::Kind::unknown);
  CHECK(resolvers.resolve(record_of("PAY", "2")).kind() == Resolution::Kind::unknown);
  const auto t0 = std::chrono::steady_clock::now();
  const Resolution third = resolvers.resolve(record_of("PAY", "3"));
  CHECK(std::chrono::steady_clock::now() - t0 < 20ms);  // no third thread, no wait
  CHECK_THAT(third.snapshot(), Catch::Contains("still running"));
  CHECK(running == 2);
  gate.release();
  for (int i = 0; i < 5000 && running > 0; ++i)
    std::this_thread::sleep_for(1ms);
  // The slots are free again.
  for (int i = 0; i < 5000; ++i) {
    if (resolvers.resolve(record_of("PAY", "4")).kind() == Resolution::Kind::not_happened) break;
    std::this_thread::sleep_for(1ms);
  }
  CHECK(resolvers.resolve(record_of("PAY", "5")).kind() == Resolution::Kind::not_happened);
}

TEST_CASE("resolvers: bad registrations are InvalidArgument") {
  idem::Resolvers resolvers;
  auto fine = [](const idem::Record&, const idem::ResolveContext&) {
    return Resolution::not_happened();
  };
  CHECK_THROWS_AS(resolvers.add("bad type", fine), idem::InvalidArgument);
  CHECK_THROWS_AS(resolvers.add("PAY", idem::Resolver{}), idem::InvalidArgument);
  CHECK_THROWS_AS(resolvers.add("PAY", fine, {.time_limit = 0ms}), idem::InvalidArgument);
  resolvers.add("PAY", fine);
  CHECK_THROWS_AS(resolvers.add("PAY", fine), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::Resolvers({.max_running = 0}), idem::InvalidArgument);
}

TEST_CASE("resolvers: a response too large to store is unknown, not a crash") {
  idem::Resolvers resolvers;
  resolvers.add("PAY", [](const idem::Record&, const idem::ResolveContext&) {
    return Resolution::happened(std::string(idem::max_snapshot_bytes + 1, 'x'));
  });
  CHECK(resolvers.resolve(record_of("PAY", "1")).kind() == Resolution::Kind::unknown);
}

TEST_CASE(
    "resolvers: after a restore, every claim of a covered biz_type asks first until the "
    "window closes") {
  idem::ManualClock clock;
  idem::MemoryStore store{[&] { return clock.now(); }};
  idem::Resolvers resolvers;
  std::atomic<int> asked{0};
  resolvers.add("PAY", [&](const idem::Record& r, const idem::ResolveContext&) {
    ++asked;
    // The gateway charged T-1 before the backup was restored; T-2 never.
    if (r.key.id() == "T-1") return Resolution::happened(nlohmann::json{{"charge", "ch_1"}});
    return Resolution::not_happened();
  });
  const idem::Options options{.resolvers = &resolvers};
  int charges = 0;
  auto charge = [&] {
    ++charges;
    return nlohmann::json{{"charge", "ch_new"}};
  };
  // Outside a window a fresh claim runs without asking.
  CHECK(idem::run_once(store, idem::Key{"PAY", "T-0"}, "", charge, options).acquired());
  CHECK(asked == 0);

  resolvers.ask_every_claim_until(clock.now() + std::chrono::hours{24});
  const auto t1 = idem::run_once(store, idem::Key{"PAY", "T-1"}, "", charge, options);
  CHECK(t1.verdict() == idem::Verdict::replayed);
  CHECK(t1.value()["charge"] == "ch_1");
  const auto t2 = idem::run_once(store, idem::Key{"PAY", "T-2"}, "", charge, options);
  CHECK(t2.acquired());
  CHECK(asked == 2);
  CHECK(charges == 2);  // T-0 and T-2; T-1 was charged before and is not charged again
  // A biz_type without a resolver is not asked.
  CHECK(idem::run_once(store, idem::Key{"MAIL", "m"}, "", charge, options).acquired());
  CHECK(asked == 2);

  clock.advance(std::chrono::hours{25});  // the window closed
  CHECK(idem::run_once(store, idem::Key{"PAY", "T-3"}, "", charge, options).acquired());
  CHECK(asked == 2);
}
