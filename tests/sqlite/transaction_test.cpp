// idem::sqlite::Transaction (idem/sqlite/transaction.hpp,
// idem/same_transaction/own_transaction.hpp): one transaction on the application's own sqlite3* as
// an object. It begins, is the store the guards claim through, and commits only what
// with_transaction's try would commit.
#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <idem/guard.hpp>
#include <idem/optional_operations.hpp>
#include <idem/run_once.hpp>
#include <idem/sqlite.hpp>

#include "../support/sqlite_file.hpp"

using idem_test::insert_business_row;
using idem_test::RawConnection;
using idem_test::TempDir;

// The transaction is the bound store, with its optional operations.
static_assert(idem::Store<idem::sqlite::Transaction>);
static_assert(idem::AbandoningStore<idem::sqlite::Transaction>);
static_assert(idem::in_caller_transaction_v<idem::sqlite::Transaction>);

namespace {

std::int64_t transaction_biz_rows(idem::sqlite::Store& store) {
  return idem_test::scalar(store, "SELECT COUNT(*) FROM biz");
}

bool transaction_open(sqlite3* db) {
  return sqlite3_get_autocommit(db) == 0;
}

struct TransactionFile {
  TempDir dir;
  idem::sqlite::Store store{dir / "own.db"};
  RawConnection app{dir / "own.db"};
  TransactionFile() { idem_test::create_business_table(store); }
};

}  // namespace

TEST_CASE("sqlite Transaction: begins - commits a finished claim with the business write") {
  TransactionFile f;
  const idem::Key key{"PAY", "t-commit"};
  {
    idem::sqlite::Transaction tx(f.store, f.app.db);
    CHECK(transaction_open(f.app.db));
    const auto out = idem::run_once(tx, key, "", [&] {
      insert_business_row(f.app.db, key.id());
      return 1;
    });
    CHECK(out.acquired());
    tx.commit();
    CHECK(tx.committed());
    CHECK_FALSE(transaction_open(f.app.db));
  }
  CHECK(transaction_biz_rows(f.store) == 1);
  CHECK(f.store.find(key)->status == idem::Status::succeeded);

  // The duplicate replays in a transaction of its own and writes nothing.
  idem::sqlite::Transaction again(f.store, f.app.db);
  const auto replay = idem::run_once(again, key, "", [&] {
    insert_business_row(f.app.db, key.id());
    return 2;
  });
  CHECK(replay.replayed());
  CHECK(replay.value() == 1);
  again.commit();
  CHECK(transaction_biz_rows(f.store) == 1);
}

TEST_CASE("sqlite Transaction: a retryable failure rolls back the business write and the claim") {
  TransactionFile f;
  const idem::Key key{"PAY", "t-retryable"};
  idem::sqlite::Transaction tx(f.store, f.app.db);
  {
    idem::IdempotencyGuard guard{tx, key, ""};
    REQUIRE(guard.acquired());
    insert_business_row(f.app.db, key.id());
    guard.fail({{"error", "gateway 503"}}, true);
  }
  tx.commit();
  CHECK_FALSE(tx.committed());
  CHECK_FALSE(transaction_open(f.app.db));
  CHECK(transaction_biz_rows(f.store) == 0);
  CHECK(idem_test::count(f.store) == 0);  // the redelivery runs afresh
}

TEST_CASE("sqlite Transaction: a forgotten guard result commits nothing - UsageError names it") {
  TransactionFile f;
  const idem::Key key{"PAY", "t-forgotten"};
  idem::sqlite::Transaction tx(f.store, f.app.db);
  {
    idem::IdempotencyGuard guard{tx, key, ""};
    REQUIRE(guard.acquired());
    insert_business_row(f.app.db, key.id());
  }
  CHECK_THROWS_AS(tx.commit(), idem::UsageError);
  CHECK_FALSE(transaction_open(f.app.db));
  CHECK(transaction_biz_rows(f.store) == 0);
  CHECK(idem_test::count(f.store) == 0);
  CHECK_THROWS_WITH(tx.commit(), Catch::Contains("already ended"));
}

TEST_CASE(
    "sqlite Transaction: destroyed without commit - or after the body threw - it rolls back") {
  TransactionFile f;
  const idem::Key key{"PAY", "t-thrown"};
  CHECK_THROWS_AS(
      [&] {
        idem::sqlite::Transaction tx(f.store, f.app.db);
        (void)idem::run_once(tx, key, "", [&]() -> int {
          insert_business_row(f.app.db, key.id());
          throw std::runtime_error("the body failed");
        });
        tx.commit();
      }(),
      std::runtime_error);
  CHECK_FALSE(transaction_open(f.app.db));
  CHECK(transaction_biz_rows(f.store) == 0);
  CHECK(idem_test::count(f.store) == 0);
  {
    idem::sqlite::Transaction tx(f.store, f.app.db);
    insert_business_row(f.app.db, "not committed");
  }
  CHECK(transaction_biz_rows(f.store) == 0);
}

TEST_CASE("sqlite Transaction: joins a transaction the caller began - roll_back ends it") {
  TransactionFile f;
  f.app.exec("BEGIN IMMEDIATE");
  idem::sqlite::Transaction tx(f.store, f.app.db);  // no second BEGIN
  insert_business_row(f.app.db, "joined");
  tx.roll_back();
  CHECK_FALSE(transaction_open(f.app.db));
  CHECK(transaction_biz_rows(f.store) == 0);
  CHECK_THROWS_AS(tx.roll_back(), idem::UsageError);
}

TEST_CASE("sqlite Transaction: a null handle is refused") {
  TransactionFile f;
  CHECK_THROWS_AS(idem::sqlite::Transaction(f.store, nullptr), idem::InvalidArgument);
}

TEST_CASE("sqlite Transaction: 8 threads on their own handles deliver one key 5 times - one run") {
  TransactionFile f;
  const idem::Key key{"PAY", "t-race"};
  std::atomic<int> runs{0};
  std::atomic<int> committed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      RawConnection own{f.dir / "own.db"};
      for (int delivery = 0; delivery < 5; ++delivery) {
        idem::sqlite::Transaction tx(f.store, own.db);  // BEGIN IMMEDIATE: one writer at a time
        (void)idem::run_once(tx, key, "", [&] {
          ++runs;
          insert_business_row(own.db, key.id());
          return 1;
        });
        tx.commit();
        if (tx.committed()) ++committed;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  CHECK(runs == 1);
  CHECK(committed == 40);
  CHECK(transaction_biz_rows(f.store) == 1);
}
