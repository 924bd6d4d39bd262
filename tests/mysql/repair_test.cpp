// Fenced repairs (idem/repair.hpp) on MariaDB: applied at the fence read and written as
// computed, refused with the current record when the fence moved on or without one when there
// is no record, exactly one winner among racing connections, inside the caller's transaction,
// and the reason's bytes kept whatever the session's character set.
#include <mysql.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/mysql_server.hpp"
#include "../support/threads.hpp"

using namespace std::chrono_literals;
using idem::Repair;
using idem::RepairAction;
using idem_test::Errors;
using idem_test::Table;

namespace {

const idem::Options repair_lease{.lease = 60s, .ttl = 1h};

}  // namespace

TEST_CASE("a repair at the fence read is written as computed and fences the worker out") {
  Table t;
  const idem::Key key{"PAY", "repair-applied"};
  const auto claim = t.store.claim(key, "fp", repair_lease);
  REQUIRE(claim.verdict == idem::Verdict::acquired);

  const idem::Record done = t.store.repair(key, Repair{.action = RepairAction::complete,
                                                       .fence = claim.record.ticket.fence,
                                                       .snapshot = R"({"charge":"ch_1"})",
                                                       .reason = "gateway shows ch_1",
                                                       .keep = 48h});
  CHECK(done.status == idem::Status::succeeded);
  CHECK(done.ticket.fence == claim.record.ticket.fence + 1);
  CHECK(done.ticket.owner != claim.record.ticket.owner);
  CHECK(done.snapshot == R"({"charge":"ch_1"})");
  CHECK(done.repair_reason == "gateway shows ch_1");
  REQUIRE(done.repaired_at.has_value());
  CHECK(*done.repaired_at == done.updated_at);
  CHECK(done.expire_at >= done.updated_at + 48h);
  CHECK(done.attempts == claim.record.attempts);
  // The row holds exactly what repair() answered, to the millisecond.
  CHECK(t.store.find(key) == done);

  // The crashed worker wakes up: fenced out. A duplicate replays the repaired answer.
  CHECK_THROWS_AS(t.store.complete(key, claim.record.ticket, R"({"late":true})"), idem::LeaseLost);
  const auto dup = t.store.claim(key, "fp", repair_lease);
  CHECK(dup.verdict == idem::Verdict::replayed);
  CHECK(dup.record.snapshot == R"({"charge":"ch_1"})");

  // Each action writes its status; a release lets the next claim run again, keeping the reason
  // until then.
  const idem::Record released = t.store.repair(
      key, Repair{.action = RepairAction::release, .fence = done.ticket.fence, .reason = "refund"});
  CHECK(released.status == idem::Status::failed);
  CHECK(released.retryable);
  CHECK(t.store.find(key) == released);
  const auto again = t.store.claim(key, "fp", repair_lease);
  CHECK(again.verdict == idem::Verdict::acquired);
  CHECK_FALSE(again.after_crash);
  CHECK(again.record.repair_reason == "refund");
  CHECK(again.record.ticket.fence == released.ticket.fence + 1);
}

TEST_CASE("a repair at a moved fence is refused with the current record, a missing one without") {
  Table t;
  const idem::Key key{"PAY", "repair-refused"};
  const auto claim = t.store.claim(key, "fp", repair_lease);
  t.store.complete(key, claim.record.ticket, R"({"ok":1})");
  const auto current = t.store.find(key);
  try {
    t.store.repair(key, Repair{.action = RepairAction::fail,
                               .fence = claim.record.ticket.fence + 1,  // not the stored one
                               .snapshot = R"({"error":"x"})",
                               .reason = "wrong fence"});
    FAIL("a repair at a fence never read was applied");
  } catch (const idem::RepairRefused& e) {
    REQUIRE(e.current().has_value());
    CHECK(*e.current() == *current);
  }
  CHECK(t.store.find(key) == current);  // nothing written

  try {
    t.store.repair(idem::Key{"PAY", "repair-nothing"},
                   Repair{.action = RepairAction::release, .fence = 1, .reason = "gone"});
    FAIL("a repair of a missing record was applied");
  } catch (const idem::RepairRefused& e) {
    CHECK_FALSE(e.current().has_value());
  }
  CHECK(t.count("idempotent_key = 'repair-nothing'") == 0);
  // A bad repair is refused before anything is sent.
  CHECK_THROWS_AS(t.store.repair(key, Repair{.action = RepairAction::complete,
                                             .fence = claim.record.ticket.fence,
                                             .reason = "no snapshot"}),
                  idem::InvalidArgument);
}

TEST_CASE("16 connections race to repair one fence: exactly one repair is applied") {
  Table t(16);
  constexpr int racers = 16;
  constexpr int rounds = 10;
  for (int round = 0; round < rounds; ++round) {
    const idem::Key key{"PAY", "repair-race-" + std::to_string(round)};
    const auto claim = t.store.claim(key, "fp", repair_lease);
    std::atomic<int> won{0};
    std::atomic<int> refused{0};
    Errors errors;
    std::vector<std::optional<idem::Record>> answers(racers);
    idem_test::run_threads(racers, [&](int i) {
      const RepairAction action =
          i % 4 == 0
              ? RepairAction::complete
              : (i % 4 == 1 ? RepairAction::fail
                            : (i % 4 == 2 ? RepairAction::release : RepairAction::mark_unknown));
      try {
        answers[static_cast<std::size_t>(i)] =
            t.store.repair(key, Repair{.action = action,
                                       .fence = claim.record.ticket.fence,
                                       .snapshot = action == RepairAction::release ? "" : "{}",
                                       .reason = "racer " + std::to_string(i)});
        ++won;
      } catch (const idem::RepairRefused& e) {
        ++refused;
        if (!e.current() || e.current()->ticket.fence != claim.record.ticket.fence + 1) {
          errors.add("refused without the winner's record");
        }
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    });
    INFO(errors.first());
    REQUIRE(errors.size() == 0);
    REQUIRE(won.load() == 1);
    REQUIRE(refused.load() == racers - 1);
    const auto stored = t.store.find(key);
    for (const auto& a : answers)
      if (a) CHECK(stored == *a);  // the winner's record is the one stored
    CHECK(stored->ticket.fence == claim.record.ticket.fence + 1);
  }
}

TEST_CASE("a repair through the bound store commits or rolls back with the transaction") {
  Table t;
  const idem::Key key{"PAY", "repair-bound"};
  const auto claim = t.store.claim(key, "fp", repair_lease);
  const Repair repair{.action = RepairAction::mark_unknown,
                      .fence = claim.record.ticket.fence,
                      .reason = "charge sent, no answer"};
  CHECK_THROWS_AS(idem::mysql::with_transaction(*t.pool,
                                                [&](idem::mysql::Connection& c) -> int {
                                                  auto tx = t.store.bind(c);
                                                  tx.repair(key, repair);
                                                  throw std::runtime_error("rolled back");
                                                }),
                  std::runtime_error);
  CHECK(t.store.find(key)->status == idem::Status::processing);

  const idem::Record marked = idem::mysql::with_transaction(
      *t.pool, [&](idem::mysql::Connection& c) { return t.store.bind(c).repair(key, repair); });
  CHECK(marked.status == idem::Status::outcome_unknown);
  CHECK(t.store.find(key) == marked);
  CHECK(t.store.claim(key, "fp", repair_lease).verdict == idem::Verdict::outcome_unknown);
}

TEST_CASE("a repair reason keeps its bytes on a borrowed handle in another character set") {
  Table t;
  const idem::Key key{"PAY", "repair-latin1"};
  const auto claim = t.store.claim(key, "fp", repair_lease);
  const std::string reason = "Zahlung best\xc3\xa4tigt \xe2\x80\x94 \xe6\x94\xaf\xe4\xbb\x98 ok";

  const auto params = idem_test::server();
  MYSQL* m = mysql_init(nullptr);
  REQUIRE(m != nullptr);
  mysql_options(m, MYSQL_SET_CHARSET_NAME, "latin1");
  REQUIRE(mysql_real_connect(m, "localhost", params.user.c_str(), nullptr, params.database.c_str(),
                             0, params.unix_socket.c_str(), 0) != nullptr);
  struct Close {
    MYSQL* m;
    ~Close() { mysql_close(m); }
  } close{m};
  idem::mysql::check(m, mysql_query(m, "START TRANSACTION"), "begin");
  auto tx = t.store.bind(m);
  const idem::Record written = tx.repair(key, Repair{.action = RepairAction::release,
                                                     .fence = claim.record.ticket.fence,
                                                     .reason = reason});
  CHECK(written.repair_reason == reason);
  CHECK(tx.find(key)->repair_reason == reason);  // read back through latin1
  idem::mysql::check(m, mysql_query(m, "COMMIT"), "commit");
  CHECK(t.store.find(key)->repair_reason == reason);
}
