// Same-transaction mode on MariaDB commits only a finished request: a claim abandoned by its
// guard, failed retryably (a 5xx of idem::http::handle, a consume body that threw) or left
// processing never commits together with the business rows of its transaction, so a
// redelivery cannot run the business a second time on top of them.
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <idem/consume.hpp>
#include <idem/http/handle.hpp>
#include <idem/optional_operations.hpp>
#include <idem/run_once.hpp>

#include "../support/mysql_server.hpp"

using idem_test::BusinessTable;
using idem_test::Table;

// The optional operations these tests rely on (idem/optional_operations.hpp): a signature that
// drifted would silently fall back to the plain contract.
static_assert(idem::AbandoningStore<idem::mysql::BoundStore>);
static_assert(idem::RollbackOnlyStore<idem::mysql::BoundStore>);
static_assert(idem::AttemptCountingStore<idem::mysql::BoundStore>);
static_assert(idem::in_caller_transaction_v<idem::mysql::BoundStore>);
static_assert(!idem::supports_wait_v<idem::mysql::BoundStore>);
static_assert(idem::BatchClaimingStore<idem::mysql::Store>);
static_assert(!idem::in_caller_transaction_v<idem::mysql::Store>);

namespace {

idem::http::Request post(const std::string& key) {
  idem::http::Request r;
  r.target = "/payments";
  r.headers = {{"Content-Type", "application/json"}, {"Idempotency-Key", "\"" + key + "\""}};
  r.body = R"({"amount":100})";
  return r;
}

}  // namespace

TEST_CASE("a forgotten commit: three deliveries, no business row, a UsageError naming the key") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::Key key{"PAY", "forgotten-commit"};
  auto deliver = [&](bool remember) {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      idem::IdempotencyGuard guard{tx, key, ""};
      if (!guard.acquired()) return 0;
      biz.insert(c, key.id());
      if (remember) guard.commit(1);
      return 1;  // the guard goes out of scope without a result when !remember
    });
  };
  for (int delivery = 0; delivery < 3; ++delivery) {
    try {
      deliver(false);
      FAIL("a transaction with an abandoned claim committed");
    } catch (const idem::UsageError& e) {
      CHECK_THAT(e.what(), Catch::Contains("PAY/forgotten-commit") &&
                               Catch::Contains("abandoned") && Catch::Contains("rolled back"));
    }
    CHECK(biz.rows() == 0);
    CHECK(t.count() == 0);  // the claim rolled back with the rows
  }
  CHECK(deliver(true) == 1);
  CHECK(deliver(true) == 0);  // a replay
  CHECK(biz.rows() == 1);
  CHECK(t.count("status = 1") == 1);
}

TEST_CASE("a 5xx after the business wrote: rolled back, the next try runs afresh, once") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::http::Policy policy{.biz_type = "payments.create"};
  int runs = 0;
  auto attempt = [&](int status) {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::http::handle(
          tx, post("k-5xx"),
          [&] {
            ++runs;
            biz.insert(c, "k-5xx");
            return idem::http::Response{status, {}, R"({"n":1})"};
          },
          policy);
    });
  };
  for (int i = 0; i < 3; ++i) {
    CHECK(attempt(503).status == 503);  // the body's answer is returned after the rollback
    CHECK(biz.rows() == 0);
    CHECK(t.count() == 0);
  }
  CHECK(attempt(201).status == 201);
  const auto replay = attempt(201);
  CHECK(replay.status == 201);
  CHECK(replay.header("Idempotent-Replayed") == std::optional<std::string>{"true"});
  CHECK(runs == 4);
  CHECK(biz.rows() == 1);
}

TEST_CASE("a consumer that wrote and then threw: retry_later, and one row after redelivery") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::Key key{"order.paid", "msg-throws-once"};
  int runs = 0;
  auto deliver = [&] {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::consume(tx, key, "", [&] {
        biz.insert(c, key.id());
        if (++runs == 1) throw std::runtime_error("downstream hiccup after the write");
      });
    });
  };
  const idem::Ack first = deliver();
  CHECK(first == idem::Ack::retry_later);
  CHECK(biz.rows() == 0);
  CHECK(deliver() == idem::Ack::commit);
  CHECK(deliver() == idem::Ack::commit);  // replayed
  CHECK(runs == 2);
  CHECK(biz.rows() == 1);
}

TEST_CASE("a bound batch with one failing message rolls back whole and runs each once later") {
  Table t;
  BusinessTable biz(t.pool);
  std::vector<idem::ClaimRequest> batch;
  for (int i = 0; i < 4; ++i)
    batch.push_back({idem::Key{"order.paid", "batch-" + std::to_string(i)}, ""});
  int failures_left = 1;
  std::vector<int> runs(batch.size(), 0);
  auto deliver = [&] {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::consume_batch(tx, batch, [&](std::size_t i) {
        ++runs[i];
        biz.insert(c, batch[i].key.id());
        if (i == 2 && failures_left-- > 0) throw std::runtime_error("message 2 failed");
      });
    });
  };
  const auto first = deliver();
  for (const idem::Ack& ack : first)
    CHECK(ack == idem::Ack::retry_later);
  CHECK(runs == std::vector<int>{1, 1, 1, 0});  // message 3 was not run in a doomed batch
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 1);  // message 2's failed attempt, counted after the rollback
  CHECK(t.count("attempts = 1 AND retryable = 1") == 1);
  for (const idem::Ack& ack : deliver())
    CHECK(ack == idem::Ack::commit);
  CHECK(biz.rows() == 4);
  CHECK(biz.max_per_key() == 1);
}

TEST_CASE("a poison message in the business transaction: dead-lettered on its last attempt") {
  const auto how = GENERATE(idem::BoundClaim::claim_first, idem::BoundClaim::record_last);
  const bool own_handle = GENERATE(false, true);  // bind(MYSQL*) or bind(Connection&)
  Table t(4, {.bound_claim = how});
  BusinessTable biz(t.pool);
  const idem::Key key{"order.paid", "poison"};
  const idem::ConsumerPolicy policy{.max_attempts = 3};
  int runs = 0;
  auto deliver = [&] {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto apply = [&] {
        ++runs;
        biz.insert(c, key.id());
        throw std::runtime_error("the ledger rejects this payment");
      };
      if (own_handle) {
        auto tx = t.store.bind(c.native());
        return idem::consume(tx, key, "fp", apply, {.consumer = &policy});
      }
      auto tx = t.store.bind(c);
      return idem::consume(tx, key, "fp", apply, {.consumer = &policy});
    });
  };
  for (std::uint32_t attempt = 1; attempt < 3; ++attempt) {
    const idem::Ack ack = deliver();
    CHECK(ack == idem::Ack::retry_later);
    CHECK(ack.delay == policy.delay_after(attempt));
    // Counted although the claim rolled back with the business's row.
    CHECK(t.count("attempts = " + std::to_string(attempt) + " AND retryable = 1") == 1);
    CHECK(biz.rows() == 0);
  }
  const idem::Ack last = deliver();
  CHECK(last == idem::Ack::dead_letter);
  CHECK_THAT(last.reason, Catch::Contains("gave up after 3 attempts"));
  // A copy replays the recorded failure and is dead-lettered again (the consumer that gave
  // up may have died before its dead letter went out).
  const idem::Ack copy = deliver();
  CHECK(copy == idem::Ack::dead_letter);
  CHECK(copy.verdict == idem::Verdict::replayed);
  CHECK(runs == 3);
  CHECK(biz.rows() == 0);
  const auto record = t.store.find(key);
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK_FALSE(record->retryable);
  CHECK(record->attempts == 3);
  CHECK(nlohmann::json::parse(record->snapshot)["error"] == "idem.attempts_exhausted");
}

TEST_CASE("copies of a poison message racing in business transactions stop at the limit") {
  // A rolled-back claim does not hold the count while it runs: copies in flight at once may
  // run at the same count, and each may use the key's last attempt. Every run is counted,
  // so it ends: at most max_attempts + 2 * (copies - 1) runs (docs/consumers.md).
  constexpr int copies = 8;
  constexpr std::uint32_t limit = 4;
  constexpr int deliveries_per_copy = 40;
  Table t(copies);
  BusinessTable biz(t.pool);
  const idem::Key key{"order.paid", "poison-race"};
  const idem::ConsumerPolicy policy{.max_attempts = limit, .first_delay = idem::Duration::zero()};
  std::atomic<int> runs{0};
  std::atomic<int> stopped{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < copies; ++i) {
    threads.emplace_back([&] {
      for (int d = 0; d < deliveries_per_copy; ++d) {
        idem::Ack ack;
        try {
          ack = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
            auto tx = t.store.bind(c);
            return idem::consume(tx, key, "fp",
                                 [&] {
                                   runs.fetch_add(1);
                                   biz.insert(c, key.id());
                                   throw std::runtime_error("poison");
                                 },
                                 {.consumer = &policy});
          });
        } catch (const idem::StoreError&) {
          continue;  // not acknowledged: delivered again
        }
        if (ack != idem::Ack::retry_later) {
          stopped.fetch_add(1);
          return;
        }
      }
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(stopped.load() == copies);  // every copy was dead-lettered or replayed the failure
  CHECK(runs.load() >= static_cast<int>(limit));
  CHECK(runs.load() <= static_cast<int>(limit) + 2 * (copies - 1));
  CHECK(biz.rows() == 0);
  const auto record = t.store.find(key);
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK_FALSE(record->retryable);
}

TEST_CASE("a claim that finished beside a retryable one cannot commit: UsageError") {
  Table t;
  BusinessTable biz(t.pool);
  CHECK_THROWS_WITH(
      idem::mysql::with_transaction(*t.pool,
                                    [&](idem::mysql::Connection& c) {
                                      auto tx = t.store.bind(c);
                                      idem::IdempotencyGuard a{tx, idem::Key{"PAY", "mixed-a"}, ""};
                                      idem::IdempotencyGuard b{tx, idem::Key{"PAY", "mixed-b"}, ""};
                                      biz.insert(c, "mixed-a");
                                      a.commit(1);
                                      b.fail({{"error", "later"}}, true);
                                    }),
      Catch::Contains("PAY/mixed-b") && Catch::Contains("own transaction"));
  CHECK(biz.rows() == 0);
  CHECK(t.count() == 0);
}

TEST_CASE("a caller's own transaction asks the bound store whether it may commit") {
  Table t;
  BusinessTable biz(t.pool);
  auto c = t.pool->acquire();
  const idem::Key key{"PAY", "own-tx"};

  c->query("START TRANSACTION");
  {
    auto tx = t.store.bind(*c);
    CHECK(tx.committable());  // nothing claimed yet
    {
      idem::IdempotencyGuard guard{tx, key, ""};
      REQUIRE(guard.acquired());
      CHECK_FALSE(tx.committable());  // processing
      biz.insert(*c, key.id());
    }
    CHECK_FALSE(tx.committable());
    CHECK_THROWS_WITH(tx.check_committable(),
                      Catch::Contains("PAY/own-tx") && Catch::Contains("abandoned"));
  }
  c->query("ROLLBACK");
  CHECK(biz.rows() == 0);

  c->query("START TRANSACTION");
  {
    auto tx = t.store.bind(*c);
    auto out = idem::run_once(tx, key, "", [&] {
      biz.insert(*c, key.id());
      return 7;
    });
    CHECK(out.verdict() == idem::Verdict::acquired);
    CHECK(tx.committable());
    tx.check_committable();
  }
  c->query("COMMIT");
  CHECK(biz.rows() == 1);
}

TEST_CASE("a bound claim outside any transaction is refused and writes nothing") {
  Table t;
  auto c = t.pool->acquire();
  auto tx = t.store.bind(*c);
  CHECK_THROWS_AS(tx.claim(idem::Key{"PAY", "no-tx"}, "", {}), idem::UsageError);
  CHECK(t.count() == 0);
}
