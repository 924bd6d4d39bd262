// Several processes on one file. The parent holds no open connection (and runs no thread)
// when it forks; every child opens its own store after fork() and reports through its exit
// status or the database file, never through Catch2.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/sqlite_file.hpp"
#include "child_process.hpp"

using namespace std::chrono_literals;
using idem_test::Pipe;
using idem_test::spawn;
using idem_test::TempDir;
using idem_test::wait_exit;

TEST_CASE("8 processes race 2,000 keys at 12% duplicates on one file - executions equal keys") {
  TempDir dir;
  const auto file = dir / "processes.db";
  const idem::sqlite::StoreParams params{.synchronous = idem::sqlite::Synchronous::normal};
  {
    idem::sqlite::Store store{file, params};
    idem_test::create_business_table(store);
    store.pool().acquire()->exec(
        "CREATE TABLE stats (pid INTEGER, requests INTEGER, executed INTEGER, replayed INTEGER)");
  }  // closed: no connection crosses fork()

  constexpr int processes = 8;
  constexpr int distinct = 2'000;
  constexpr int requests = distinct * 100 / 88;  // 2,272 requests: 272 duplicates (12%)
  // Every key once, in order, and each duplicate a slot or two after its key's first request.
  // Request i goes to process i % 8, so a duplicate lands in another process at about the same
  // moment as the original.
  std::vector<std::vector<int>> slots(distinct);
  for (int k = 0; k < distinct; ++k)
    slots[static_cast<std::size_t>(k)].push_back(k);
  std::mt19937 rng(2000);
  for (int d = 0; d < requests - distinct; ++d) {
    const int k = static_cast<int>(rng() % distinct);
    const int j = std::min(distinct - 1, k + static_cast<int>(rng() % 3));
    slots[static_cast<std::size_t>(j)].push_back(k);
  }
  std::vector<int> order;
  for (const auto& s : slots)
    order.insert(order.end(), s.begin(), s.end());
  REQUIRE(order.size() == requests);

  Pipe start;
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    children.push_back(spawn([&, p]() -> int {
      start.close_write();
      start.wait();
      idem::sqlite::Store store{file, params};  // opened after fork()
      const auto pid = static_cast<std::int64_t>(::getpid());
      int mine = 0, executed = 0, replayed = 0, wrong = 0;
      for (std::size_t i = static_cast<std::size_t>(p); i < order.size(); i += processes) {
        const std::string id = "order-" + std::to_string(order[i]);
        ++mine;
        const auto out = idem::run_once(
            store, idem::Key{"ORDER", id}, "",
            [&] {
              ++executed;
              store.pool().acquire()->execute("INSERT INTO biz (trade_no, pid) VALUES (?, ?)",
                                              {id, pid});
              return id;
            },
            idem::Options{.wait = 20s});
        if (out.verdict() == idem::Verdict::replayed) ++replayed;
        if (!out || out.value() != id) ++wrong;
      }
      store.pool().acquire()->execute("INSERT INTO stats VALUES (?, ?, ?, ?)",
                                      {pid, mine, executed, replayed});
      return wrong == 0 ? 0 : 2;
    }));
  }
  start.close_write();  // go
  start.close_read();
  std::vector<int> codes;
  for (pid_t pid : children)
    codes.push_back(wait_exit(pid));
  CHECK(codes == std::vector<int>(processes, 0));  // 71: an exception, 2: a wrong answer

  idem::sqlite::Store store{file, params};
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == distinct);
  CHECK(idem_test::scalar(store, "SELECT COUNT(DISTINCT trade_no) FROM biz") == distinct);
  CHECK(idem_test::scalar(store, "SELECT COUNT(DISTINCT pid) FROM biz") == processes);
  CHECK(idem_test::count(store, "status = 1 AND fence = 1 AND attempts = 1") == distinct);
  CHECK(idem_test::scalar(store, "SELECT SUM(requests) FROM stats") == requests);
  CHECK(idem_test::scalar(store, "SELECT SUM(executed) FROM stats") == distinct);
  CHECK(idem_test::scalar(store, "SELECT SUM(replayed) FROM stats") == requests - distinct);
}

TEST_CASE(
    "a child killed with SIGKILL between claim and commit: after the lease its record is "
    "taken over exactly once") {
  TempDir dir;
  const auto file = dir / "killed.db";
  {
    idem::sqlite::Store store{file};
    idem_test::create_business_table(store);
  }
  const idem::Key key{"PAY", "CH-killed-1"};
  const idem::Options options{.lease = 300ms, .ttl = 1h};

  Pipe claimed;
  const pid_t child = spawn([&]() -> int {
    claimed.close_read();
    idem::sqlite::Store store{file};
    idem::IdempotencyGuard guard{store, key, "", options};
    if (!guard.acquired()) return 3;
    claimed.signal();  // the business is "running" now; the process dies before it records
    for (;;)
      ::pause();
  });
  claimed.close_write();
  REQUIRE(claimed.wait());
  ::kill(child, SIGKILL);
  CHECK(wait_exit(child) == 128 + SIGKILL);

  idem::sqlite::Store store{file};
  const auto left = store.find(key);
  REQUIRE(left.has_value());
  CHECK(left->status == idem::Status::processing);
  CHECK(left->ticket.fence == 1);
  if (idem::system_now() + 50ms < left->lease_until) {
    CHECK(store.claim(key, "", options).verdict == idem::Verdict::in_progress);
  }
  std::this_thread::sleep_until(left->lease_until + 20ms);

  std::atomic<int> executed{0}, others{0};
  idem_test::Errors errors;
  idem_test::run_threads(8, [&](int) {
    try {
      const auto out = idem::run_once(
          store, key, "",
          [&] {
            ++executed;
            store.pool().acquire()->execute("INSERT INTO biz (trade_no) VALUES (?)", {key.id()});
            std::this_thread::sleep_for(20ms);
            return std::string("paid");
          },
          options);
      if (out.verdict() != idem::Verdict::acquired) ++others;
    } catch (const std::exception& e) {
      errors.add(e.what());
    }
  });
  INFO("first error: " << errors.first());
  CHECK(errors.size() == 0);
  CHECK(executed == 1);
  CHECK(others == 7);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 1);
  const auto after = store.find(key);
  REQUIRE(after.has_value());
  CHECK(after->status == idem::Status::succeeded);
  CHECK(after->ticket.fence == 2);
  CHECK(after->attempts == 2);
  CHECK(after->ticket.owner != left->ticket.owner);
}

TEST_CASE("a child killed inside a same-transaction body leaves neither a record nor a lock") {
  TempDir dir;
  const auto file = dir / "killed-tx.db";
  {
    idem::sqlite::Store store{file};
    idem_test::create_business_table(store);
  }
  const idem::Key key{"ORDER", "killed-in-tx"};

  Pipe inside;
  const pid_t child = spawn([&]() -> int {
    inside.close_read();
    idem::sqlite::Store store{file};
    idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
      auto tx = store.bind(c);
      if (tx.claim(key, "", {}).verdict != idem::Verdict::acquired) ::_exit(3);
      c.execute("INSERT INTO biz (trade_no) VALUES (?)", {key.id()});
      inside.signal();  // holds the write lock, uncommitted, when it dies
      for (;;)
        ::pause();
    });
    return 4;
  });
  inside.close_write();
  REQUIRE(inside.wait());

  // While the child holds the write lock, a claim waits for it and gives up.
  idem::sqlite::Store store{
      file, {.busy_timeout = 100ms, .retry = {.max_attempts = 1}, .create_schema = false}};
  try {
    store.claim(key, "", {});
    FAIL("claimed while another process held the write lock");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK((e.diagnostics().code & 0xff) == SQLITE_BUSY);
  }
  ::kill(child, SIGKILL);
  CHECK(wait_exit(child) == 128 + SIGKILL);

  // The kernel dropped the dead process's locks; its uncommitted frames never count.
  const auto t0 = std::chrono::steady_clock::now();
  const auto c = store.claim(key, "", {});
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK(c.verdict == idem::Verdict::acquired);
  CHECK(c.record.ticket.fence == 1);
  CHECK(idem_test::scalar(store, "SELECT COUNT(*) FROM biz") == 0);
}
