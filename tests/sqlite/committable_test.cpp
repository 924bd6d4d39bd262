// Same-transaction mode on SQLite commits only a finished request, as on MySQL: a claim
// abandoned by its guard, failed retryably (a 5xx of idem::http::handle, a consume body that
// threw) or left processing never commits with the business rows of its transaction.
#include <sqlite3.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/consume.hpp>
#include <idem/http/handle.hpp>
#include <idem/optional_operations.hpp>
#include <idem/run_once.hpp>

#include "../support/sqlite_file.hpp"

using idem_test::insert_business_row;
using idem_test::RawConnection;
using idem_test::TempDir;

// The optional operations these tests rely on (idem/optional_operations.hpp): a signature that
// drifted would silently fall back to the plain contract.
static_assert(idem::AbandoningStore<idem::sqlite::BoundStore>);
static_assert(idem::RollbackOnlyStore<idem::sqlite::BoundStore>);
static_assert(idem::AttemptCountingStore<idem::sqlite::BoundStore>);
static_assert(idem::in_caller_transaction_v<idem::sqlite::BoundStore>);
static_assert(!idem::in_caller_transaction_v<idem::sqlite::Store>);

namespace {

std::int64_t business_rows(idem::sqlite::Store& store) {
  return idem_test::scalar(store, "SELECT COUNT(*) FROM biz");
}

}  // namespace

TEST_CASE("a forgotten commit on the caller's sqlite3*: no row, UsageError, 3 times") {
  TempDir dir;
  const auto file = dir / "forgotten.db";
  idem::sqlite::Store store{file};
  idem_test::create_business_table(store);
  RawConnection app{file};
  const idem::Key key{"PAY", "forgotten"};
  auto deliver = [&](bool remember) {
    return idem::sqlite::with_transaction(app.db, [&](sqlite3* db) {
      auto tx = store.bind(db);
      idem::IdempotencyGuard guard{tx, key, ""};
      if (!guard.acquired()) return 0;
      insert_business_row(db, key.id());
      if (remember) guard.commit(1);
      return 1;
    });
  };
  for (int delivery = 0; delivery < 3; ++delivery) {
    CHECK_THROWS_WITH(deliver(false),
                      Catch::Contains("PAY/forgotten") && Catch::Contains("abandoned"));
    CHECK(business_rows(store) == 0);
    CHECK(idem_test::count(store) == 0);
    CHECK(sqlite3_get_autocommit(app.db) != 0);  // rolled back, not left open
  }
  CHECK(deliver(true) == 1);
  CHECK(deliver(true) == 0);
  CHECK(business_rows(store) == 1);
}

TEST_CASE("a 5xx after the business wrote is rolled back - the next try runs once") {
  TempDir dir;
  idem::sqlite::Store store{dir / "5xx.db"};
  idem_test::create_business_table(store);
  idem::http::Request request;
  request.target = "/payments";
  request.headers = {{"Idempotency-Key", "\"k-5xx\""}};
  request.body = R"({"amount":1})";
  int runs = 0;
  auto attempt = [&](int status) {
    return idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
      auto tx = store.bind(c);
      return idem::http::handle(tx, request, [&] {
        ++runs;
        insert_business_row(c.native(), "k-5xx");
        return idem::http::Response{status, {}, "{}"};
      });
    });
  };
  for (int i = 0; i < 3; ++i) {
    CHECK(attempt(500).status == 500);
    CHECK(business_rows(store) == 0);
    CHECK(idem_test::count(store) == 0);
  }
  CHECK(attempt(201).status == 201);
  CHECK(attempt(201).header("Idempotent-Replayed") == std::optional<std::string>{"true"});
  CHECK(runs == 4);
  CHECK(business_rows(store) == 1);
}

TEST_CASE("a consumer that wrote and then threw: one row after the redelivery") {
  TempDir dir;
  idem::sqlite::Store store{dir / "consume.db"};
  idem_test::create_business_table(store);
  const idem::Key key{"order.paid", "throws-once"};
  int runs = 0;
  auto deliver = [&] {
    return idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
      auto tx = store.bind(c);
      return idem::consume(tx, key, "", [&] {
        insert_business_row(c.native(), key.id());
        if (++runs == 1) throw std::runtime_error("failed after the write");
      });
    });
  };
  CHECK(deliver() == idem::Ack::retry_later);
  CHECK(business_rows(store) == 0);
  CHECK(deliver() == idem::Ack::commit);
  CHECK(deliver() == idem::Ack::commit);
  CHECK(runs == 2);
  CHECK(business_rows(store) == 1);
}

TEST_CASE("a poison message in the business transaction: dead-lettered on its last attempt") {
  TempDir dir;
  const auto file = dir / "poison.db";
  idem::sqlite::Store store{file};
  idem_test::create_business_table(store);
  RawConnection app{file};
  const bool own_handle = GENERATE(false, true);  // bind(sqlite3*) or bind(Connection&)
  const idem::Key key{"order.paid", "poison"};
  const idem::ConsumerPolicy policy{.max_attempts = 3};
  int runs = 0;
  auto apply = [&](sqlite3* db) {
    ++runs;
    insert_business_row(db, key.id());
    throw std::runtime_error("the ledger rejects this payment");
  };
  auto deliver = [&] {
    if (own_handle) {
      return idem::sqlite::with_transaction(app.db, [&](sqlite3* db) {
        auto tx = store.bind(db);
        return idem::consume(tx, key, "fp", [&] { apply(db); }, {.consumer = &policy});
      });
    }
    return idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
      auto tx = store.bind(c);
      return idem::consume(tx, key, "fp", [&] { apply(c.native()); }, {.consumer = &policy});
    });
  };
  for (std::uint32_t attempt = 1; attempt < 3; ++attempt) {
    const idem::Ack ack = deliver();
    CHECK(ack == idem::Ack::retry_later);
    CHECK(ack.delay == policy.delay_after(attempt));
    // Counted although the claim rolled back with the business's row.
    CHECK(idem_test::count(store, "attempts = " + std::to_string(attempt)) == 1);
    CHECK(business_rows(store) == 0);
  }
  const idem::Ack last = deliver();
  CHECK(last == idem::Ack::dead_letter);
  CHECK_THAT(last.reason, Catch::Contains("gave up after 3 attempts") &&
                              Catch::Contains("the ledger rejects this payment"));
  // A copy replays the recorded failure and is dead-lettered again (the consumer that gave
  // up may have died before its dead letter went out).
  const idem::Ack copy = deliver();
  CHECK(copy == idem::Ack::dead_letter);
  CHECK(copy.verdict == idem::Verdict::replayed);
  CHECK(runs == 3);
  CHECK(business_rows(store) == 0);
  const auto record = store.find(key);
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK_FALSE(record->retryable);
  CHECK(record->attempts == 3);
  const auto error = nlohmann::json::parse(record->snapshot);
  CHECK(error["error"] == "idem.attempts_exhausted");
  CHECK(error["attempts"] == 3);
  CHECK(sqlite3_get_autocommit(app.db) != 0);  // nothing left open on the caller's handle
}

TEST_CASE("the caller's own transaction asks whether it may commit") {
  TempDir dir;
  const auto file = dir / "own-tx.db";
  idem::sqlite::Store store{file};
  idem_test::create_business_table(store);
  RawConnection app{file};
  const idem::Key key{"PAY", "own-tx"};
  app.exec("BEGIN IMMEDIATE");
  {
    auto tx = store.bind(app.db);
    {
      idem::IdempotencyGuard guard{tx, key, ""};
      REQUIRE(guard.acquired());
      insert_business_row(app.db, key.id());
    }
    CHECK_FALSE(tx.committable());
    CHECK_THROWS_WITH(tx.check_committable(), Catch::Contains("PAY/own-tx"));
  }
  app.exec("ROLLBACK");
  CHECK(business_rows(store) == 0);
  app.exec("BEGIN IMMEDIATE");
  {
    auto tx = store.bind(app.db);
    CHECK(idem::run_once(tx, key, "", [&] {
            insert_business_row(app.db, key.id());
            return 1;
          }).verdict() == idem::Verdict::acquired);
    tx.check_committable();
  }
  app.exec("COMMIT");
  CHECK(business_rows(store) == 1);
}
