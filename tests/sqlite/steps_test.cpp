// Recovery points (record_step) on idem::sqlite: the column they are kept in, the fence that
// guards them, a takeover that answers exactly the steps it took over, steps written in the
// caller's transaction, and a worker process killed with SIGKILL after a step whose successor
// resumes after it.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "../support/sqlite_file.hpp"
#include "child_process.hpp"

using namespace std::chrono_literals;
using idem_test::Pipe;
using idem_test::spawn;
using idem_test::TempDir;
using idem_test::wait_exit;

namespace {

struct StepsFixture {
  TempDir dir;
  idem::ManualClock clock;
  idem::sqlite::Store store{dir / "steps.db",
                            idem::sqlite::StoreParams{.clock = [this] { return clock.now(); }}};
};

// The recovery_points column as stored: its SQLite type and bytes (nullopt: NULL).
std::optional<std::pair<int, std::string>> points_column(idem::sqlite::Store& store,
                                                         const idem::Key& key) {
  auto c = store.pool().acquire();
  auto rows = c->query(
      "SELECT recovery_points FROM " + store.table() + " WHERE idempotent_key = ? AND biz_type = ?",
      {key.id(), key.biz_type()});
  if (!rows.next()) throw std::runtime_error("no row");
  if (rows.is_null(0)) return std::nullopt;
  return std::pair{rows.type(0), rows.text(0)};
}

}  // namespace

TEST_CASE("record_step keeps the points as a JSON blob, guarded by the claim's fence") {
  StepsFixture fx;
  auto& store = fx.store;
  const idem::Key key{"PAY", "steps-column"};
  const auto c = store.claim(key, "", {.lease = 1s, .ttl = 1h});
  CHECK_FALSE(points_column(store, key).has_value());  // a fresh claim: NULL

  fx.clock.advance(100ms);
  const std::string points = store.record_step(key, c.record.ticket, "reserve", R"({"hold":7})");
  CHECK(points == R"({"reserve":{"hold":7}})");
  CHECK(points_column(store, key) == std::optional(std::pair{SQLITE_BLOB, points}));
  const auto read = store.find(key);
  REQUIRE(read.has_value());
  CHECK(read->recovery_points == points);
  CHECK(read->updated_at == fx.clock.now());
  // A step kept once keeps its first result, and writes nothing.
  fx.clock.advance(100ms);
  CHECK(store.record_step(key, c.record.ticket, "reserve", R"({"hold":8})") == points);
  CHECK(store.find(key)->updated_at == read->updated_at);
  // A wrong ticket, or none: LeaseLost, nothing written.
  CHECK_THROWS_AS(store.record_step(key, idem::Ticket{c.record.ticket.fence + 1, "x"}, "b", "1"),
                  idem::LeaseLost);
  CHECK_THROWS_AS(store.record_step(idem::Key{"PAY", "none"}, c.record.ticket, "b", "1"),
                  idem::LeaseLost);
  CHECK(store.find(key)->recovery_points == points);
}

TEST_CASE(
    "steps written at once by one claim all stay - 8 threads, 7 steps each, and a stale "
    "guess of the stored points") {
  StepsFixture fx;
  auto& store = fx.store;
  const idem::Key key{"PAY", "steps-race"};
  const auto c = store.claim(key, "", {});
  // A guess of the stored points that is stale: its guarded write changes nothing, and the
  // step is added to the points as they are.
  CHECK(store.record_step(key, c.record.ticket, "a", "1", std::string_view{}) == R"({"a":1})");
  CHECK(store.record_step(key, c.record.ticket, "b", "2", std::string_view{}) ==
        R"({"a":1,"b":2})");

  constexpr int threads = 8;
  constexpr int steps = 7;  // with a and b: 58 steps, under max_steps
  idem_test::Errors errors;
  idem_test::run_threads(threads, [&](int t) {
    for (int i = 0; i < steps; ++i) {
      try {
        store.record_step(key, c.record.ticket, "t" + std::to_string(t) + "-" + std::to_string(i),
                          std::to_string(t * 100 + i));
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  const auto points = nlohmann::json::parse(store.find(key)->recovery_points);
  CHECK(points.size() == 2 + threads * steps);
  for (int t = 0; t < threads; ++t)
    for (int i = 0; i < steps; ++i)
      CHECK(points["t" + std::to_string(t) + "-" + std::to_string(i)] == t * 100 + i);
}

TEST_CASE(
    "a takeover answers exactly the steps it took over - a step the stale worker adds "
    "between the read and the write makes the write lose, and the claim look again") {
  StepsFixture fx;
  auto& store = fx.store;
  const idem::Key key{"PAY", "steps-takeover"};
  const idem::Options o{.lease = 1s, .ttl = 1h};
  const auto first = store.claim(key, "", o);
  store.record_step(key, first.record.ticket, "reserve", "1");
  fx.clock.advance(2s);

  // What a claim decides on its read: a takeover of the stale claim with the points it read.
  const auto seen = store.find(key);
  REQUIRE(seen.has_value());
  const auto d = idem::backend::decide(*seen, "", fx.clock.now());
  REQUIRE(d == idem::backend::Decision::take_over_stale);
  const idem::Record next =
      idem::backend::take_over(*seen, d, "", "takeover-token", fx.clock.now(), o);
  // The stale worker is still alive and records another step in between.
  store.record_step(key, first.record.ticket, "charge", R"("ch_1")");
  {
    auto c = store.pool().acquire();
    CHECK_FALSE(store.ops().write_takeover(*c, d, next, seen->ticket));
  }
  // The claim itself reads again and takes over with both steps.
  const auto resumed = store.claim(key, "", o);
  REQUIRE(resumed.verdict == idem::Verdict::acquired);
  CHECK(resumed.after_crash);
  CHECK(resumed.record.recovery_points == R"({"charge":"ch_1","reserve":1})");
  CHECK(store.find(key) == resumed.record);
  CHECK_THROWS_AS(store.record_step(key, first.record.ticket, "ship", "1"), idem::LeaseLost);

  // An expired record's takeover starts without steps or repair, in the row too.
  store.complete(key, resumed.record.ticket, "1");
  store.repair(key, {.action = idem::RepairAction::complete,
                     .fence = resumed.record.ticket.fence,
                     .snapshot = "2",
                     .reason = "corrected",
                     .keep = 2h});
  fx.clock.advance(3h);
  const auto fresh = store.claim(key, "", o);
  REQUIRE(fresh.verdict == idem::Verdict::acquired);
  CHECK(fresh.record.recovery_points.empty());
  CHECK(fresh.record.repair_reason.empty());
  CHECK(idem_test::count(store,
                         "recovery_points IS NULL AND repair_reason IS NULL AND "
                         "repaired_at IS NULL") == 1);
  CHECK(store.find(key) == fresh.record);
}

TEST_CASE(
    "a bound store records a step in the caller's transaction - it commits or rolls back "
    "with the business writes beside it") {
  StepsFixture fx;
  auto& store = fx.store;
  idem_test::create_business_table(store);
  const idem::Key key{"ORDER", "steps-bound"};
  const auto c = store.claim(key, "", {});

  CHECK_THROWS_AS(idem::sqlite::with_transaction(store.pool(),
                                                 [&](idem::sqlite::Connection& conn) {
                                                   auto tx = store.bind(conn);
                                                   conn.execute(
                                                       "INSERT INTO biz (trade_no) "
                                                       "VALUES ('reserved')");
                                                   tx.record_step(key, c.record.ticket, "reserve",
                                                                  "1");
                                                   throw std::runtime_error("rolled back");
                                                 }),
                  std::runtime_error);
  CHECK(store.find(key)->recovery_points.empty());
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 0);

  // Through Attempt::step(bound, ...), inside the standalone claim's business.
  int reserved = 0;
  const auto run = [&](idem::Attempt<idem::sqlite::Store>& attempt) {
    return idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& conn) {
      auto tx = store.bind(conn);
      return attempt.step(tx, "reserve", [&] {
        ++reserved;
        conn.execute("INSERT INTO biz (trade_no) VALUES ('reserved')");
        return 7;
      });
    });
  };
  fx.clock.advance(31s);  // the first claim is stale: the next run takes it over
  const auto out = idem::run_once(store, key, "", run);
  REQUIRE(out);
  CHECK(out.value() == 7);
  CHECK(reserved == 1);
  CHECK(store.find(key)->recovery_points == R"({"reserve":7})");
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 1);
  // A bound step with a ticket that no longer holds: LeaseLost, rolled back.
  CHECK_THROWS_AS(idem::sqlite::with_transaction(store.pool(),
                                                 [&](idem::sqlite::Connection& conn) {
                                                   auto tx = store.bind(conn);
                                                   return tx.record_step(key, c.record.ticket,
                                                                         "late", "1");
                                                 }),
                  idem::LeaseLost);
}

TEST_CASE(
    "Attempt::complete finishes the action with the business's last transaction - both "
    "commit or neither does") {
  StepsFixture fx;
  auto& store = fx.store;
  idem_test::create_business_table(store);
  const idem::Key key{"ORDER", "steps-complete"};
  int tries = 0;
  auto business = [&](idem::Attempt<idem::sqlite::Store>& attempt) {
    const int hold = attempt.step("reserve", [] { return 7; });
    return idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& conn) {
      auto tx = store.bind(conn);
      conn.execute("INSERT INTO biz (trade_no) VALUES ('paid')");
      const int r = attempt.complete(tx, hold * 10 + ++tries);
      if (tries == 1) throw std::runtime_error("rolled back after the completion");
      return r;
    });
  };
  CHECK_THROWS_AS(idem::run_once(store, key, "", business), std::runtime_error);
  CHECK(store.find(key)->status == idem::Status::failed);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 0);

  const auto out = idem::run_once(store, key, "", business);
  REQUIRE(out);
  CHECK(out.value() == 72);
  CHECK(store.find(key)->status == idem::Status::succeeded);
  CHECK(store.find(key)->snapshot == "72");
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 1);
  const auto again = idem::run_once(store, key, "", business);
  REQUIRE(again);
  CHECK(again.verdict() == idem::Verdict::replayed);
  CHECK(again.value() == 72);
  CHECK(tries == 2);
}

TEST_CASE(
    "a worker killed with SIGKILL after its first step - the takeover after the lease "
    "resumes after_crash with the step kept, and runs only the rest") {
  TempDir dir;
  const auto file = dir / "killed-steps.db";
  { idem::sqlite::Store store{file}; }
  const idem::Key key{"PAY", "CH-steps-killed"};
  const idem::Options options{.lease = 300ms, .ttl = 1h};

  Pipe stepped;
  const pid_t child = spawn([&]() -> int {
    stepped.close_read();
    idem::sqlite::Store store{file};
    idem::run_once(
        store, key, "",
        [&](idem::Attempt<idem::sqlite::Store>& attempt) {
          attempt.step("reserve", [] { return nlohmann::json{{"hold", 41}}; });
          return attempt.step("charge", [&] {
            stepped.signal();  // "calling the gateway" when it dies
            for (;;)
              ::pause();
            return 0;
          });
        },
        options);
    return 3;
  });
  stepped.close_write();
  REQUIRE(stepped.wait());
  ::kill(child, SIGKILL);
  CHECK(wait_exit(child) == 128 + SIGKILL);

  idem::sqlite::Store store{file};
  const auto left = store.find(key);
  REQUIRE(left.has_value());
  CHECK(left->status == idem::Status::processing);
  CHECK(left->recovery_points == R"({"reserve":{"hold":41}})");
  std::this_thread::sleep_until(left->lease_until + 20ms);

  int reserves = 0, charges = 0;
  bool after_crash = false;
  const auto out = idem::run_once(
      store, key, "",
      [&](idem::Attempt<idem::sqlite::Store>& attempt) {
        after_crash = attempt.after_crash();
        const auto hold = attempt.step("reserve", [&] {
          ++reserves;
          return nlohmann::json{{"hold", 99}};
        });
        const int charge = attempt.step("charge", [&] { return ++charges; });
        return nlohmann::json{{"hold", hold["hold"]}, {"charge", charge}, {"n", attempt.number()}};
      },
      options);
  REQUIRE(out);
  CHECK(after_crash);
  CHECK(reserves == 0);  // kept from the dead worker
  CHECK(charges == 1);
  CHECK(out.value() == nlohmann::json{{"hold", 41}, {"charge", 1}, {"n", 2}});
  const auto done = store.find(key);
  REQUIRE(done.has_value());
  CHECK(done->status == idem::Status::succeeded);
  CHECK(done->ticket.fence == 2);
  CHECK(nlohmann::json::parse(done->recovery_points) ==
        nlohmann::json{{"reserve", {{"hold", 41}}}, {"charge", 1}});
}
