// idem::backend::BasicPool (idem/backend/pool.hpp) on a driver that counts what it was asked: the
// bounds, lazy opening, readying an idle connection, dropping an unusable one, and the error when
// none frees up in time. The server suites run the same pool on real connections.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <idem/backend/pool.hpp>

using namespace std::chrono_literals;

namespace {

struct CountedConnection {
  int id = 0;
  bool usable = true;
  std::atomic<bool> in_use{false};
  int readied = 0;
  idem::backend::ConnectionPurpose last_use = idem::backend::ConnectionPurpose::statements;
};

struct CountingDriver {
  using Connection = CountedConnection;
  std::shared_ptr<std::atomic<int>> opened = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<bool>> fail_open = std::make_shared<std::atomic<bool>>(false);

  std::unique_ptr<Connection> open() const {
    if (*fail_open) throw idem::StoreError("cannot connect", true);
    auto c = std::make_unique<Connection>();
    c->id = ++*opened;
    return c;
  }
  static void ready(Connection& c, idem::Duration, idem::backend::ConnectionPurpose use) {
    ++c.readied;
    c.last_use = use;
  }
  static bool reusable(Connection& c) noexcept { return c.usable; }
  static std::string where() { return " to the test"; }
};

using CountingPool = idem::backend::BasicPool<CountingDriver>;

}  // namespace

TEST_CASE("BasicPool: the bounds are checked when it is made") {
  CHECK_THROWS_WITH(CountingPool(CountingDriver{}, 0, 10ms, "test::Pool"),
                    "test::Pool: size must be at least 1");
  CHECK_THROWS_WITH(CountingPool(CountingDriver{}, 2, -1ms, "test::Pool"),
                    "test::Pool: the acquire timeout must not be negative");
  CHECK(CountingPool(CountingDriver{}, 3, 0ms, "test::Pool").size() == 3);
}

TEST_CASE("BasicPool: opens lazily - readies an idle connection for the use asked") {
  CountingDriver driver;
  CountingPool pool(driver, 2, 100ms, "test::Pool");
  CHECK(*driver.opened == 0);
  int first_id = 0;
  {
    auto h = pool.acquire();
    first_id = h->id;
    CHECK(h->readied == 0);  // a new connection is not readied
  }
  {
    auto h = pool.acquire(idem::backend::ConnectionPurpose::transaction);
    CHECK(h->id == first_id);  // the idle one, again
    CHECK(h->readied == 1);
    CHECK(h->last_use == idem::backend::ConnectionPurpose::transaction);
  }
  CHECK(*driver.opened == 1);
}

TEST_CASE("BasicPool: a connection returned unusable is dropped - its slot opens a new one") {
  CountingDriver driver;
  CountingPool pool(driver, 1, 100ms, "test::Pool");
  {
    auto h = pool.acquire();
    h->usable = false;
  }
  auto h = pool.acquire();
  CHECK(h->id == 2);
  CHECK(*driver.opened == 2);
}

TEST_CASE("BasicPool: none free within the timeout - a retryable StoreError that says so") {
  CountingPool pool(CountingDriver{}, 1, 20ms, "test::Pool");
  auto held = pool.acquire();
  try {
    (void)pool.acquire();
    FAIL("acquired past the pool's size");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK(std::string(e.what()) ==
          "test::Pool: no connection to the test free within 20 ms (size 1)");
  }
}

TEST_CASE("BasicPool: a failed open gives its slot back") {
  CountingDriver driver;
  CountingPool pool(driver, 1, 20ms, "test::Pool");
  *driver.fail_open = true;
  CHECK_THROWS_WITH(pool.acquire(), "cannot connect");
  *driver.fail_open = false;
  CHECK(pool.acquire()->id == 1);  // the slot was not lost
}

TEST_CASE("BasicPool: 8 threads share 3 connections - never more open - each exclusively held") {
  CountingDriver driver;
  CountingPool pool(driver, 3, 5s, "test::Pool");
  std::atomic<int> holding{0};
  std::atomic<int> most{0};
  std::atomic<int> shared{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto h = pool.acquire();
        const int now = ++holding;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        if (h->in_use.exchange(true)) ++shared;  // another holder has it too
        std::this_thread::yield();
        h->in_use = false;
        --holding;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(most <= 3);
  CHECK(*driver.opened <= 3);
  CHECK(shared == 0);
}

namespace {

// A networked connection as the drivers' shared rules see it.
struct FakeSession {
  bool broken_ = false;
  bool ping_ok = true;
  bool in_transaction_ = false;
  bool rollback_fails = false;
  int pings = 0;
  int reconnects = 0;
  bool broken() const { return broken_; }
  bool ping() {
    ++pings;
    return ping_ok;
  }
  void reconnect() {
    ++reconnects;
    broken_ = false;
  }
  bool in_transaction() const { return in_transaction_; }
  void rollback() {
    if (rollback_fails) throw idem::StoreError("lost", true);
    in_transaction_ = false;
  }
};

bool reusable(FakeSession& s) {
  return idem::backend::reusable_after_rollback(s, [](FakeSession& open) { open.rollback(); });
}

}  // namespace

TEST_CASE("reopen_if_lost: a broken connection is reopened - an idle one pinged first") {
  FakeSession s;
  CHECK_FALSE(idem::backend::reopen_if_lost(s, 1s, 5s));
  CHECK(s.pings == 0);  // fresh enough: no round trip
  CHECK_FALSE(idem::backend::reopen_if_lost(s, 6s, 5s));
  CHECK(s.pings == 1);  // idle: pinged, answered
  s.ping_ok = false;
  CHECK(idem::backend::reopen_if_lost(s, 6s, 5s));
  CHECK(s.reconnects == 1);
  s.broken_ = true;
  CHECK(idem::backend::reopen_if_lost(s, 0s, 5s));
  CHECK(s.pings == 2);  // a known-broken connection is not pinged
  CHECK(s.reconnects == 2);
  CHECK_FALSE(s.broken());
}

TEST_CASE("reusable_after_rollback: an open transaction is rolled back - a failed rollback drops") {
  FakeSession idle;
  CHECK(reusable(idle));
  FakeSession open;
  open.in_transaction_ = true;
  CHECK(reusable(open));
  CHECK_FALSE(open.in_transaction());
  FakeSession failing;
  failing.in_transaction_ = true;
  failing.rollback_fails = true;
  CHECK_FALSE(reusable(failing));
  FakeSession broken;
  broken.broken_ = true;
  broken.in_transaction_ = true;
  CHECK_FALSE(reusable(broken));
}
