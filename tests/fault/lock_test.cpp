// Lock waits: another session holds a record's row lock past innodb_lock_wait_timeout. The
// caller gets a typed, retryable StoreError (ER_LOCK_WAIT_TIMEOUT), and once the lock is gone
// the record is not dead: the same claim completes, duplicates replay.
#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/fault_server.hpp"

using namespace std::chrono_literals;

namespace {

// Sets a 1 s lock wait timeout on every connection of the pool (size n), for this test only.
void short_lock_waits(idem::mysql::Pool& pool, std::size_t n) {
  std::vector<idem::mysql::Pool::Handle> all;
  for (std::size_t i = 0; i < n; ++i)
    all.push_back(pool.acquire());
  for (auto& c : all)
    c->query("SET SESSION innodb_lock_wait_timeout = 1");
}

struct Locker {
  idem::mysql::Connection c{idem_test::server()};
  Locker(const std::string& table, const idem::Key& key) {
    c.query("START TRANSACTION");
    c.select("SELECT fence FROM " + table + " WHERE idempotent_key = ? AND biz_type = ? FOR UPDATE",
             {key.id(), key.biz_type()});
  }
  void release() { c.query("COMMIT"); }
};

}  // namespace

TEST_CASE(
    "lock wait timeout - a row lock held elsewhere is a typed retryable error, and no dead state "
    "afterwards") {
  idem_test::Table t(2, {.retry = {.max_attempts = 2}});
  short_lock_waits(*t.pool, 2);
  const idem::Key key{"PAY", "locked"};
  const auto claim = t.store.claim(key, "fp-1", {});
  REQUIRE(claim.verdict == idem::Verdict::acquired);
  const auto before = t.store.find(key);

  Locker locker(t.store.table(), key);
  // A duplicate's claim waits on the row lock, twice (max_attempts), then gives up.
  bool claim_timed_out = false, complete_timed_out = false;
  try {
    t.store.claim(key, "fp-1", {});
  } catch (const idem::StoreError& e) {
    claim_timed_out = e.retryable() && e.diagnostics().code == idem::mysql::code::lock_wait_timeout;
  }
  // The owner's own complete() waits on the same lock.
  try {
    t.store.complete(key, claim.record.ticket, R"({"receipt":"R-1"})");
  } catch (const idem::StoreError& e) {
    complete_timed_out =
        e.retryable() && e.diagnostics().code == idem::mysql::code::lock_wait_timeout;
  }
  CHECK(t.store.find(key) == before);  // nothing changed while the lock was held
  locker.release();

  CHECK(claim_timed_out);
  CHECK(complete_timed_out);
  // No dead state: the owner's retry completes, duplicates replay it.
  t.store.complete(key, claim.record.ticket, R"({"receipt":"R-1"})");
  const auto dup = t.store.claim(key, "fp-1", {});
  CHECK(dup.verdict == idem::Verdict::replayed);
  CHECK(dup.record.snapshot == R"({"receipt":"R-1"})");
  CHECK(idem_fault::processing_past_lease(t) == 0);
  CHECK(t.count("status = 0") == 0);
}

TEST_CASE(
    "lock wait timeout in same-transaction mode - the transaction gives up with a typed "
    "retryable error and leaves neither a record nor a lock") {
  idem_test::Table t(2);
  short_lock_waits(*t.pool, 2);
  idem_fault::BusinessTable biz(t.pool);
  const idem::Key key{"PAY", "locked-tx"};
  // A standalone claim that is then failed retryably: the row exists, and may be taken over.
  const auto first = t.store.claim(key, "", {});
  REQUIRE(first.verdict == idem::Verdict::acquired);
  t.store.fail(key, first.record.ticket, R"({"error":"timeout"})", true);
  const auto before = t.store.find(key);

  Locker locker(t.store.table(), key);
  long runs = 0;
  bool timed_out = false;
  try {
    idem::mysql::with_transaction(*t.pool,
                                  [&](idem::mysql::Connection& c) {
                                    auto tx = t.store.bind(c);
                                    idem::IdempotencyGuard guard{tx, key, ""};
                                    if (guard.acquired()) {
                                      ++runs;
                                      biz.insert(c, key.id());
                                      guard.commit(std::string("done"));
                                    }
                                    return 0;
                                  },
                                  {.retry = {.max_attempts = 2}});
  } catch (const idem::StoreError& e) {
    timed_out = e.retryable() && e.diagnostics().code == idem::mysql::code::lock_wait_timeout;
  }
  CHECK(t.store.find(key) == before);
  locker.release();

  CHECK(timed_out);
  CHECK(runs == 0);
  CHECK(biz.rows() == 0);
  // The next try takes the failed record over and runs once.
  const auto out = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    auto tx = t.store.bind(c);
    return idem::run_once(tx, key, "", [&] {
      ++runs;
      biz.insert(c, key.id());
      return std::string("done");
    });
  });
  CHECK(out.verdict() == idem::Verdict::acquired);
  CHECK(runs == 1);
  CHECK(biz.rows() == 1);
  CHECK(t.count("status = 1") == 1);
  CHECK(idem_fault::processing_past_lease(t) == 0);
}
