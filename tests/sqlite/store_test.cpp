// idem::sqlite::Store on real files: restarts, pragmas, schema, locked / corrupt / unopenable
// files, thread races, same-transaction mode, housekeeping and hostile names.
#include <sqlite3.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/sqlite_file.hpp"

using namespace std::chrono_literals;
using idem_test::insert_business_row;
using idem_test::RawConnection;
using idem_test::TempDir;

namespace {

void write_file(const std::filesystem::path& path, const std::string& bytes,
                std::streamoff offset = 0) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) f.open(path, std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string garbage(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string pragma(idem::sqlite::Store& store, const std::string& name) {
  auto c = store.pool().acquire();
  auto rows = c->query("PRAGMA " + name);
  return rows.next() ? rows.text(0) : std::string{};
}

}  // namespace

TEST_CASE("records survive a restart: a reopened file replays what an earlier store recorded") {
  TempDir dir;
  const auto file = dir / "restart.db";
  const idem::Key key{"PAY", "CH-restart-1"};
  const auto fp = idem::fingerprint(nlohmann::json{{"trade_no", "CH-restart-1"}, {"fen", 29900}});
  {
    idem::sqlite::Store store{file};
    const auto out = idem::run_once(store, key, fp, [] { return std::string("paid"); });
    REQUIRE(out.verdict() == idem::Verdict::acquired);
  }
  idem::sqlite::Store reopened{file};
  int runs = 0;
  const auto again = idem::run_once(reopened, key, fp, [&] {
    ++runs;
    return std::string("paid twice");
  });
  CHECK(runs == 0);
  CHECK(again.verdict() == idem::Verdict::replayed);
  REQUIRE(again);
  CHECK(again.value() == "paid");
}

TEST_CASE("connections run in WAL mode, synchronous FULL by default and NORMAL on request") {
  TempDir dir;
  {
    idem::sqlite::Store store{dir / "full.db"};
    CHECK(pragma(store, "journal_mode") == "wal");
    CHECK(pragma(store, "synchronous") == "2");  // FULL
    CHECK(pragma(store, "busy_timeout") == "5000");
  }
  idem::sqlite::Store store{
      dir / "normal.db",
      {.busy_timeout = 1234ms, .synchronous = idem::sqlite::Synchronous::normal}};
  CHECK(pragma(store, "journal_mode") == "wal");
  CHECK(pragma(store, "synchronous") == "1");  // NORMAL
  CHECK(pragma(store, "busy_timeout") == "1234");
}

TEST_CASE("the schema: byte-exact TEXT keys, the primary key and two indexes, idempotent DDL") {
  TempDir dir;
  idem::sqlite::Store store{dir / "schema.db"};
  {
    auto c = store.pool().acquire();
    std::vector<std::string> columns;
    auto info =
        c->query("SELECT name, type, pk FROM pragma_table_info('idempotent_record') ORDER BY cid");
    while (info.next())
      columns.push_back(info.text(0) + " " + info.text(1) + " " + std::to_string(info.integer(2)));
    CHECK(columns == std::vector<std::string>{
                         "idempotent_key TEXT 1", "biz_type TEXT 2", "status INTEGER 0",
                         "fence INTEGER 0", "owner_token TEXT 0", "request_hash TEXT 0",
                         "response_snapshot BLOB 0", "retryable INTEGER 0", "attempts INTEGER 0",
                         "lease_until INTEGER 0", "created_at INTEGER 0", "updated_at INTEGER 0",
                         "expire_at INTEGER 0", "recovery_points BLOB 0", "repair_reason TEXT 0",
                         "repaired_at INTEGER 0"});
    std::vector<std::string> indexes;
    auto idx = c->query(
        "SELECT il.name, group_concat(ii.name) FROM pragma_index_list('idempotent_record') il, "
        "pragma_index_info(il.name) ii GROUP BY il.name ORDER BY il.name");
    while (idx.next())
      indexes.push_back(idx.text(0) + ":" + idx.text(1));
    CHECK(indexes == std::vector<std::string>{"idempotent_record_idx_expire:expire_at",
                                              "idempotent_record_idx_stale:status,lease_until",
                                              "sqlite_autoindex_idempotent_record_1:idempotent_key,"
                                              "biz_type"});
  }
  store.ensure_schema();  // idempotent
  for (const char* id : {"abc", "ABC", "a", "a ", " a"})
    CHECK(store.claim(idem::Key{"PAY", id}, "", {}).verdict == idem::Verdict::acquired);
  CHECK(idem_test::count(store) == 5);
  // Plain SQL finds rows by their text, as an operator would look them up.
  CHECK(idem_test::count(store, "idempotent_key = 'a ' AND biz_type = 'PAY'") == 1);
  CHECK(idem_test::count(store,
                         "lease_until - created_at = 30000 AND expire_at - created_at = "
                         "604800000") == 5);
}

TEST_CASE("table names are validated and quoted, and two tables share one file") {
  TempDir dir;
  for (const char* bad : {"", "bad name", "t;DROP TABLE x", "t\"", "a.b.c", "x-y", "tbl'", "."}) {
    INFO(bad);
    CHECK_THROWS_AS(idem::sqlite::Store(dir / "names.db", {.table = bad}), idem::InvalidArgument);
  }
  CHECK_THROWS_AS(idem::sqlite::quote_identifier(std::string(65, 'x')), idem::InvalidArgument);
  CHECK(idem::sqlite::quote_identifier("main.idempotent_record") ==
        R"("main"."idempotent_record")");
  CHECK(idem::sqlite::quote_identifier("pay_$records") == R"("pay_$records")");

  idem::sqlite::Store pay{dir / "names.db", {.table = "pay_records"}};
  idem::sqlite::Store orders{dir / "names.db", {.table = "main.order_records"}};
  const idem::Key key{"PAY", "same-key"};
  CHECK(pay.claim(key, "", {}).verdict == idem::Verdict::acquired);
  CHECK(orders.claim(key, "", {}).verdict == idem::Verdict::acquired);  // another table
  CHECK(pay.claim(key, "", {}).verdict == idem::Verdict::in_progress);
  CHECK(idem_test::scalar(pay,
                          "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND "
                          "name LIKE '%_idx_%'") == 4);
}

TEST_CASE("bad parameters are refused with InvalidArgument before anything is opened") {
  TempDir dir;
  const auto file = dir / "params.db";
  CHECK_THROWS_AS(idem::sqlite::Store(""), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::sqlite::Store(":memory:"), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::sqlite::Store(file, {.clock = nullptr}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::sqlite::Store(file, {.pool_size = 0}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::sqlite::Store(file, {.retry = {.max_attempts = 0}}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::sqlite::Store(file, {.busy_timeout = -1ms}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::sqlite::Store(file, {.retry = {.backoff = 10ms, .max_backoff = 5ms}}),
                  idem::InvalidArgument);
  CHECK_FALSE(std::filesystem::exists(file));

  idem::sqlite::Store store{file};
  CHECK_THROWS_AS(store.bind(static_cast<sqlite3*>(nullptr)), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::sqlite::with_transaction(store.pool(), [](idem::sqlite::Connection&) {},
                                                 {.retry = {.max_attempts = 0}}),
                  idem::InvalidArgument);
}

TEST_CASE("Connection: bound values, verbatim text and blobs, one statement per call") {
  TempDir dir;
  idem::sqlite::Connection c{dir / "conn.db"};
  c.exec("CREATE TABLE t (a, b, c, d); CREATE TABLE u (x)");
  const std::string with_nul("a\0b", 3);
  CHECK(c.execute("INSERT INTO t VALUES (?, ?, ?, ?)",
                  {42, "text", idem::sqlite::Value::blob(with_nul), nullptr}) == 1);
  CHECK(c.execute("INSERT INTO t VALUES (?, ?, ?, ?)",
                  {-1, std::string("x' OR 1=1 --"), idem::sqlite::Value::blob(""), 2.5}) == 1);
  auto rows = c.query("SELECT a, b, c, d, typeof(c) FROM t ORDER BY a DESC");
  REQUIRE(rows.next());
  CHECK(rows.integer(0) == 42);
  CHECK(rows.text(1) == "text");
  CHECK(rows.text(2) == with_nul);
  CHECK(rows.is_null(3));
  REQUIRE(rows.next());
  CHECK(rows.text(1) == "x' OR 1=1 --");
  CHECK(rows.text(2).empty());
  CHECK(rows.text(4) == "blob");  // an empty blob, not NULL
  CHECK(rows.real(3) == 2.5);
  CHECK_FALSE(rows.next());

  // The same statement again while the first cursor is still open: a one-off statement.
  auto again = c.query("SELECT a, b, c, d, typeof(c) FROM t ORDER BY a DESC");
  CHECK(again.next());

  CHECK_THROWS_AS(c.execute("INSERT INTO u VALUES (1); DELETE FROM u"), idem::InvalidArgument);
  CHECK_THROWS_AS(c.execute("INSERT INTO u VALUES (?)", {1, 2}), idem::InvalidArgument);
  try {
    c.execute("INSERT INTO no_such_table VALUES (1)");
    FAIL("inserted into a table that does not exist");
  } catch (const idem::StoreError& e) {
    CHECK_FALSE(e.retryable());
    CHECK(e.diagnostics().code == SQLITE_ERROR);
    CHECK(e.diagnostics().message.find("no_such_table") != std::string::npos);
    CHECK(e.diagnostics().sqlstate.empty());
    CHECK_FALSE(e.diagnostics().from_server);
  }
  CHECK_FALSE(c.broken());
  CHECK_FALSE(c.in_transaction());
}

TEST_CASE(
    "a file locked by another connection: reads go on, claims give up with a retryable "
    "StoreError, and work once the lock is released") {
  TempDir dir;
  const auto file = dir / "locked.db";
  idem::sqlite::Store store{
      file,
      {.busy_timeout = 50ms, .retry = {.max_attempts = 2, .backoff = 1ms, .max_backoff = 2ms}}};
  const idem::Key done{"PAY", "before-the-lock"};
  store.complete(done, store.claim(done, "", {}).record.ticket, "1");

  RawConnection other{file};
  other.exec("BEGIN IMMEDIATE");  // holds the write lock
  const auto t0 = std::chrono::steady_clock::now();
  try {
    store.claim(idem::Key{"PAY", "during-the-lock"}, "", {});
    FAIL("claimed while another connection held the write lock");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK((e.diagnostics().code & 0xff) == SQLITE_BUSY);
    CHECK(e.diagnostics().message == "database is locked");
    CHECK(std::string(e.what()).find("gave up after 2 tries") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 >= 100ms);       // two busy timeouts
  CHECK(store.find(done)->status == idem::Status::succeeded);  // WAL: readers are not blocked
  // A claim is an INSERT first, so even a duplicate that will replay waits for the lock.
  CHECK_THROWS_AS(store.claim(done, "", {}), idem::StoreError);
  other.exec("COMMIT");
  CHECK(store.claim(done, "", {}).verdict == idem::Verdict::replayed);

  CHECK(store.claim(idem::Key{"PAY", "during-the-lock"}, "", {}).verdict ==
        idem::Verdict::acquired);
}

TEST_CASE("a file of garbage bytes is a clear, non-retryable StoreError, and nothing crashes") {
  TempDir dir;
  const auto file = dir / "garbage.db";
  write_file(file, garbage(16 * 1024, 7));
  for (int i = 0; i < 2; ++i) {
    try {
      idem::sqlite::Store store{file};
      FAIL("opened a file of garbage as a database");
    } catch (const idem::StoreError& e) {
      CHECK_FALSE(e.retryable());
      CHECK(e.diagnostics().code == SQLITE_NOTADB);
      CHECK(e.diagnostics().message == "file is not a database");
      CHECK(std::string(e.what()).find(file.string()) != std::string::npos);
    }
  }
  CHECK(std::filesystem::file_size(file) == 16 * 1024);  // left as it was
}

TEST_CASE("damaged pages inside a valid file fail each call with a StoreError, not a crash") {
  TempDir dir;
  const auto file = dir / "damaged.db";
  {
    idem::sqlite::Store store{file, {.synchronous = idem::sqlite::Synchronous::normal}};
    for (int i = 0; i < 300; ++i) {
      const idem::Key key{"PAY", "k" + std::to_string(i)};
      store.complete(key, store.claim(key, "", {}).record.ticket, std::string(200, 'x'));
    }
    // Every page in the file itself: a page left in the WAL would be read from there, past
    // the damage below.
    pragma(store, "wal_checkpoint(TRUNCATE)");
  }
  const std::filesystem::path wal = file.string() + "-wal";
  REQUIRE((!std::filesystem::exists(wal) || std::filesystem::file_size(wal) == 0));
  const auto size = std::filesystem::file_size(file);
  REQUIRE(size > 16 * 1024);
  write_file(file, garbage(size - 4096, 11), 4096);  // every page after the schema page

  const auto corrupt = [](const idem::StoreError& e) {
    const int primary = static_cast<int>(e.diagnostics().code) & 0xff;
    return !e.retryable() && (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) &&
           !e.diagnostics().message.empty();
  };
  // A store that checks its table at open reads the layout stamp's page and fails there.
  try {
    idem::sqlite::Store checking{file};
    FAIL("opened a damaged table");
  } catch (const idem::StoreError& e) {
    CHECK(corrupt(e));
  }
  // One that does not fails each call.
  idem::sqlite::Store store{file, {.create_schema = false, .check_table = false}};
  for (int i = 0; i < 3; ++i) {
    INFO("round " << i);
    const idem::Key key{"PAY", "k" + std::to_string(i)};
    for (int op = 0; op < 3; ++op) {
      try {
        if (op == 0) store.find(key);
        if (op == 1) store.claim(key, "", {});
        if (op == 2) store.purge_expired(100, 10);
        FAIL("a damaged page went unnoticed");
      } catch (const idem::StoreError& e) {
        CHECK(corrupt(e));
      }
    }
  }
}

TEST_CASE(
    "a path that cannot be opened is a clear StoreError: a file as parent, a missing "
    "directory, a directory") {
  TempDir dir;
  write_file(dir / "plain-file", "not a directory");
  for (const auto& path :
       {dir / "plain-file" / "idem.db", dir / "missing" / "deeper" / "idem.db", dir.path()}) {
    INFO(path.string());
    try {
      idem::sqlite::Store store{path};
      FAIL("opened a path that cannot hold a database");
    } catch (const idem::StoreError& e) {
      CHECK_FALSE(e.retryable());
      CHECK((static_cast<int>(e.diagnostics().code) & 0xff) == SQLITE_CANTOPEN);
      CHECK_FALSE(e.diagnostics().message.empty());
      CHECK(std::string(e.what()).find(path.string()) != std::string::npos);
    }
  }
}

TEST_CASE("a database file that may not be written is a clear StoreError when the store opens") {
  TempDir dir;
  const auto file = dir / "readonly.db";
  {
    idem::sqlite::Store store{file};
    store.claim(idem::Key{"PAY", "before"}, "", {});
  }
  // Root ignores permission bits, but not the immutable attribute.
  const bool root = ::geteuid() == 0;
  const std::string quoted = "'" + file.string() + "'";
  if (std::system(((root ? "chattr +i " : "chmod 0444 ") + quoted + " 2>/dev/null").c_str()) != 0) {
    WARN("cannot make " << file << " unwritable here (no chattr support); nothing to check");
    return;
  }
  struct Unlock {
    std::string command;
    ~Unlock() { [[maybe_unused]] const int rc = std::system(command.c_str()); }
  } unlock{(root ? "chattr -i " : "chmod 0644 ") + quoted};

  try {
    idem::sqlite::Store store{file};
    FAIL("opened a read-only database file for writing");
  } catch (const idem::StoreError& e) {
    CHECK_FALSE(e.retryable());
    CHECK(e.diagnostics().code == SQLITE_READONLY);
    CHECK(std::string(e.what()).find("read-only") != std::string::npos);
  }
}

TEST_CASE("32 threads race one key - one execution, everyone else replays or waits") {
  TempDir dir;
  idem::sqlite::Store store{dir / "race.db"};
  idem_test::create_business_table(store);
  const idem::Key key{"PAY", "CH-race-32"};
  const auto fp = idem::fingerprint(nlohmann::json{{"trade_no", "CH-race-32"}, {"fen", 29900}});
  std::atomic<int> executed{0}, replayed{0}, in_progress{0};
  idem_test::Errors errors;
  idem_test::run_threads(32, [&](int) {
    try {
      const auto out = idem::run_once(store, key, fp, [&] {
        ++executed;
        store.pool().acquire()->execute("INSERT INTO biz (trade_no) VALUES (?)", {key.id()});
        std::this_thread::sleep_for(20ms);
        return std::string("paid");
      });
      if (out.verdict() == idem::Verdict::replayed && out && out.value() == "paid") ++replayed;
      if (out.verdict() == idem::Verdict::in_progress) ++in_progress;
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  CHECK(executed == 1);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 1);
  CHECK(replayed + in_progress == 31);
  const auto r = store.find(key);
  REQUIRE(r);
  CHECK(r->status == idem::Status::succeeded);
  CHECK(r->ticket.fence == 1);
}

TEST_CASE("a SELECT-then-INSERT claim loses the same race (the test can catch the bug)") {
  TempDir dir;
  idem::sqlite::Store store{dir / "naive.db", {.pool_size = 16}};
  idem_test::create_business_table(store);
  // The naive claim of the articles: look, then insert; a duplicate-key error nobody catches
  // properly is taken for "created". The window between the two is where duplicates slip in.
  std::atomic<int> executed{0}, looked{0};
  idem_test::run_threads(16, [&](int) {
    auto c = store.pool().acquire();
    bool seen = false;
    {
      auto rows =
          c->query("SELECT 1 FROM " + store.table() + " WHERE idempotent_key = ? AND biz_type = ?",
                   {"naive-1", "PAY"});
      seen = rows.next();
    }
    ++looked;
    while (looked.load() < 16)  // everyone has looked before anyone inserts
      std::this_thread::yield();
    if (seen) return;
    try {
      c->execute("INSERT INTO " + store.table() +
                     " (idempotent_key, biz_type, owner_token, lease_until, created_at, "
                     "updated_at, expire_at) VALUES (?, 'PAY', 'naive', 0, 0, 0, 1)",
                 {"naive-1"});
    } catch (const idem::StoreError&) {
      // swallowed, as in the incident
    }
    ++executed;
    c->execute("INSERT INTO biz (trade_no) VALUES (?)", {"naive-1"});
  });
  CHECK(executed > 1);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") > 1);
  CHECK(idem_test::count(store) == 1);  // the primary key held; the business did not
}

TEST_CASE("16 threads, 1,000 keys at 12% duplicates over 4 connections - executions equal keys") {
  TempDir dir;
  idem::sqlite::Store store{dir / "dups.db",
                            {.synchronous = idem::sqlite::Synchronous::normal, .pool_size = 4}};
  idem_test::create_business_table(store);
  constexpr int distinct = 1'000;
  std::vector<int> order;
  for (int k = 0; k < distinct; ++k)
    order.push_back(k);
  std::mt19937 rng(12);
  while (order.size() < distinct * 100 / 88)  // 1,136 requests: 136 duplicates (12%)
    order.push_back(static_cast<int>(rng() % distinct));
  std::shuffle(order.begin(), order.end(), rng);

  std::atomic<std::size_t> next{0};
  std::atomic<int> executed{0}, answered{0};
  idem_test::Errors errors;
  idem_test::run_threads(16, [&](int) {
    for (std::size_t i = next++; i < order.size(); i = next++) {
      const std::string id = "order-" + std::to_string(order[i]);
      try {
        const auto out = idem::run_once(
            store, idem::Key{"ORDER", id}, "",
            [&] {
              ++executed;
              store.pool().acquire()->execute("INSERT INTO biz (trade_no) VALUES (?)", {id});
              return id;
            },
            idem::Options{.wait = 10s});
        if (out && out.value() == id) ++answered;
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  CHECK(executed == distinct);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == distinct);
  CHECK(idem_test::scalar(store, "SELECT COUNT(DISTINCT trade_no) FROM biz") == distinct);
  CHECK(answered == static_cast<int>(order.size()));
  CHECK(idem_test::count(store, "status = 1") == distinct);
}

TEST_CASE("same-transaction mode - a rollback leaves nothing, a commit replays") {
  TempDir dir;
  idem::sqlite::Store store{dir / "tx.db"};
  idem_test::create_business_table(store);
  const idem::Key key{"ORDER", "u42:0190f1c6-7a3b-7cc0-9a51-3f1e2d4c5b6a"};
  const auto fp = idem::fingerprint(nlohmann::json{{"sku", "A-1"}, {"qty", 2}});

  CHECK_THROWS_AS(idem::sqlite::with_transaction(
                      store.pool(),
                      [&](idem::sqlite::Connection& c) -> int {
                        auto tx = store.bind(c);
                        idem::IdempotencyGuard guard{tx, key, fp};
                        if (!guard.acquired()) throw std::logic_error("not acquired");
                        c.execute("INSERT INTO biz (trade_no) VALUES (?)", {key.id()});
                        guard.commit(1);
                        throw std::runtime_error("business check failed after the write");
                      }),
                  std::runtime_error);
  CHECK(idem_test::count(store) == 0);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 0);

  int runs = 0;
  auto body = [&](idem::sqlite::Connection& c) {
    auto tx = store.bind(c);
    return idem::run_once(tx, key, fp, [&] {
      ++runs;
      c.execute("INSERT INTO biz (trade_no) VALUES (?)", {key.id()});
      return std::string("order-created");
    });
  };
  const auto first = idem::sqlite::with_transaction(store.pool(), body);
  CHECK(first.verdict() == idem::Verdict::acquired);
  const auto second = idem::sqlite::with_transaction(store.pool(), body);
  CHECK(second.verdict() == idem::Verdict::replayed);
  REQUIRE(second);
  CHECK(second.value() == "order-created");
  CHECK(runs == 1);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 1);
  CHECK(idem_test::count(store, "status = 1") == 1);
  // The standalone store sees the committed record too.
  CHECK(store.claim(key, fp, {}).verdict == idem::Verdict::replayed);
}

TEST_CASE("same-transaction mode on the application's own sqlite3* handle") {
  TempDir dir;
  const auto file = dir / "own.db";
  idem::sqlite::Store store{file};
  idem_test::create_business_table(store);
  const idem::Key key{"ORDER", "own-handle-1"};
  {
    RawConnection app{file};
    auto body = [&](sqlite3* db) {
      auto tx = store.bind(db);
      return idem::run_once(tx, key, "", [&] {
        insert_business_row(db, key.id());
        return 7;
      });
    };
    CHECK_THROWS_AS(idem::sqlite::with_transaction(app.db,
                                                   [&](sqlite3* db) -> int {
                                                     body(db);
                                                     throw std::runtime_error("roll it back");
                                                   }),
                    std::runtime_error);
    CHECK(sqlite3_get_autocommit(app.db) != 0);  // rolled back, not left open
    CHECK(idem_test::count(store) == 0);

    const auto first = idem::sqlite::with_transaction(app.db, body);
    CHECK(first.verdict() == idem::Verdict::acquired);
    const auto second = idem::sqlite::with_transaction(app.db, body);
    CHECK(second.verdict() == idem::Verdict::replayed);
    CHECK(second.value() == 7);

    // A BoundStore finalizes its statements: the handle closes cleanly afterwards.
    {
      auto tx = store.bind(app.db);
      CHECK(tx.find(key).has_value());
    }
    CHECK(sqlite3_close(app.db) == SQLITE_OK);
    app.db = nullptr;
  }
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 1);
}

TEST_CASE("same-transaction duplicates wait for the write lock, then replay") {
  TempDir dir;
  idem::sqlite::Store store{dir / "txrace.db"};
  idem_test::create_business_table(store);
  const idem::Key key{"ORDER", "tx-race"};
  std::atomic<int> replayed{0};
  idem_test::Errors errors;
  idem_test::run_threads(16, [&](int) {
    try {
      const auto out =
          idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
            auto tx = store.bind(c);
            return idem::run_once(tx, key, "", [&] {
              c.execute("INSERT INTO biz (trade_no) VALUES (?)", {key.id()});
              std::this_thread::sleep_for(50ms);  // hold the write lock while duplicates arrive
              return 7;
            });
          });
      if (out.verdict() == idem::Verdict::replayed && out && out.value() == 7) ++replayed;
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 1);
  CHECK(replayed == 15);
}

TEST_CASE("a bound claim sees a standalone processing claim as in progress") {
  TempDir dir;
  idem::sqlite::Store store{dir / "mixed.db"};
  const idem::Key key{"PAY", "mixed"};
  const auto standalone = store.claim(key, "", {});
  REQUIRE(standalone.verdict == idem::Verdict::acquired);
  const auto bound = idem::sqlite::with_transaction(
      store.pool(), [&](idem::sqlite::Connection& c) { return store.bind(c).claim(key, "", {}); });
  CHECK(bound.verdict == idem::Verdict::in_progress);
  CHECK(bound.record == standalone.record);
  store.complete(key, standalone.record.ticket, R"("done")");

  // Outside a transaction a bound claim would commit on its own: refused, nothing written.
  auto c = store.pool().acquire();
  auto tx = store.bind(*c);
  const idem::Key other{"PAY", "bound-autocommit"};
  CHECK_THROWS_AS(tx.claim(other, "", {}), idem::UsageError);
  CHECK_FALSE(store.find(other));
}

TEST_CASE("with_transaction refuses to nest, and runs again while the file is locked") {
  TempDir dir;
  const auto file = dir / "busy.db";
  idem::sqlite::Store store{file, {.busy_timeout = 20ms}};
  {
    auto c = store.pool().acquire();
    c->exec("BEGIN");
    CHECK_THROWS_AS(idem::sqlite::with_transaction(*c, [](idem::sqlite::Connection&) {}),
                    idem::UsageError);
    c->exec("ROLLBACK");
  }

  RawConnection other{file};
  other.exec("BEGIN IMMEDIATE");
  int runs = 0;
  CHECK_THROWS_AS(
      idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection&) { ++runs; },
                                     {.retry = {.max_attempts = 2, .backoff = 1ms}}),
      idem::StoreError);
  CHECK(runs == 0);  // BEGIN IMMEDIATE itself waited and gave up

  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    other.exec("COMMIT");
  });
  const auto t0 = std::chrono::steady_clock::now();
  const int value = idem::sqlite::with_transaction(
      store.pool(),
      [&](idem::sqlite::Connection& c) {
        ++runs;
        auto tx = store.bind(c);
        const idem::Key key{"PAY", "after-wait"};
        const auto claimed = tx.claim(key, "", {});
        if (claimed.verdict == idem::Verdict::acquired)
          tx.complete(key, claimed.record.ticket, "1");
        return static_cast<int>(claimed.verdict == idem::Verdict::acquired);
      },
      {.retry = {.max_attempts = 100, .backoff = 5ms, .max_backoff = 20ms}});
  releaser.join();
  CHECK(value == 1);
  CHECK(runs == 1);
  CHECK(std::chrono::steady_clock::now() - t0 >= 150ms);
}

TEST_CASE(
    "purge_expired and release_stale work in batches, the Janitor runs them and stops "
    "promptly") {
  TempDir dir;
  idem::ManualClock clock;
  idem::sqlite::Store store{dir / "janitor.db", {.clock = [&clock] { return clock.now(); }}};
  const idem::Options brief{.lease = 200ms, .ttl = 200ms};
  for (int i = 0; i < 30; ++i)
    store.claim(idem::Key{"OLD", "k" + std::to_string(i)}, "", brief);
  const auto stale = store.claim(idem::Key{"STALE", "s"}, "", {.lease = 200ms, .ttl = 1h});
  store.claim(idem::Key{"LIVE", "l"}, "", {});
  clock.advance(300ms);

  CHECK(store.purge_expired(7, 2) == 14);
  {
    idem::sqlite::Janitor janitor(
        store, {.interval = 10ms, .purge_batch = 5, .purge_max_batches = 100, .purge_pause = 1ms});
    for (int i = 0; i < 300 && idem_test::count(store) > 2; ++i)
      std::this_thread::sleep_for(10ms);
    CHECK(janitor.stats().errors == 0);
  }
  CHECK(idem_test::count(store) == 2);
  const auto s = store.find(idem::Key{"STALE", "s"});
  REQUIRE(s);
  CHECK(s->status == idem::Status::failed);
  CHECK(s->retryable);
  CHECK(nlohmann::json::parse(s->snapshot)["error"] == "idem.lease_expired");
  CHECK_THROWS_AS(store.complete(stale.record.key, stale.record.ticket, "1"), idem::LeaseLost);
  CHECK(store.purge_expired(0, 10) == 0);
  CHECK(store.release_stale(0) == 0);

  const auto t0 = std::chrono::steady_clock::now();
  { idem::sqlite::Janitor janitor(store, {.interval = std::chrono::hours{1}}); }
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE("hostile keys are stored verbatim and never alter the table") {
  TempDir dir;
  idem::sqlite::Store store{dir / "hostile.db"};
  const std::vector<std::string> ids = {"'; DROP TABLE idempotent_record; --",
                                        "\" OR 1=1 --",
                                        "\\x00",
                                        "a`b",
                                        "%_",
                                        "Robert'); --",
                                        "ABC",
                                        "abc",
                                        "abc ",
                                        " abc",
                                        "单号-42"};
  for (const auto& id : ids) {
    const auto c = store.claim(idem::Key{"PAY", id}, "", {});
    CHECK(c.verdict == idem::Verdict::acquired);
    CHECK(c.record.key.id() == id);
  }
  CHECK(idem_test::count(store) == static_cast<long long>(ids.size()));
  for (const auto& id : ids)
    CHECK(store.find(idem::Key{"PAY", id})->key.id() == id);
}
