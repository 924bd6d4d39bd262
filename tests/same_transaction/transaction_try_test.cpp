// One try of a with_transaction (idem/same_transaction/transaction_try.hpp), on a transaction that
// only writes down what it was asked: how the try ends as its ledger says, and the writes that wait
// for its ROLLBACK.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include <idem/same_transaction/transaction_try.hpp>

#include "../support/failed_try.hpp"

namespace {

struct RecordingTx {
  std::vector<std::string> calls;
  bool fail_commit = false;
  int handle_ = 0;

  const void* handle() const noexcept { return &handle_; }
  void begin() { calls.push_back("begin"); }
  void commit() {
    calls.push_back("commit");
    if (fail_commit) throw idem::StoreError("commit failed", false);
  }
  void roll_back() { calls.push_back("roll_back"); }
  void roll_back_quietly() noexcept { calls.push_back("roll_back_quietly"); }
};

const idem::Key claimed_key{"order.paid", "t-1"};
const idem::Ticket claimed_ticket{7, "owner"};

// The ledger of the try running on tx, as a bound store finds it.
idem::same_transaction::ClaimLedger& ledger(RecordingTx& tx) {
  idem::same_transaction::ClaimLedger* l = idem::same_transaction::LedgerScope::find(tx.handle());
  REQUIRE(l != nullptr);
  return *l;
}

// A claim in the try that failed retryably: the try rolls back.
void fail_retryably(RecordingTx& tx) {
  ledger(tx).claimed(claimed_key, claimed_ticket);
  ledger(tx).ended(claimed_key, claimed_ticket,
                   idem::same_transaction::ClaimLedger::State::retryable);
}

using TxCalls = std::vector<std::string>;

}  // namespace

TEST_CASE("transaction_try: a finished claim commits and a retryable one rolls back") {
  RecordingTx tx;
  idem::same_transaction::TryReport report;
  CHECK(idem::same_transaction::run_try(tx, "test", report, [&] {
          ledger(tx).claimed(claimed_key, claimed_ticket);
          ledger(tx).ended(claimed_key, claimed_ticket,
                           idem::same_transaction::ClaimLedger::State::succeeded);
          return 1;
        }) == 1);
  CHECK(tx.calls == TxCalls{"begin", "commit"});

  RecordingTx rolled;
  idem::same_transaction::run_try(rolled, "test", report, [&] { fail_retryably(rolled); });
  CHECK(rolled.calls == TxCalls{"begin", "roll_back"});
}

TEST_CASE("transaction_try: writes after the rollback run in a transaction of their own") {
  RecordingTx tx;
  idem::same_transaction::TryReport report;
  const int answer = idem::same_transaction::run_try(tx, "test", report, [&] {
    fail_retryably(tx);
    ledger(tx).after_rollback([&] { tx.calls.push_back("write 1"); });
    ledger(tx).after_rollback([&] { tx.calls.push_back("write 2"); });
    return 5;
  });
  CHECK(answer == 5);  // the body's answer stands
  CHECK(tx.calls == TxCalls{"begin", "roll_back", "begin", "write 1", "write 2", "commit"});
}

TEST_CASE("transaction_try: a try that commits or throws drops the writes after a rollback") {
  idem::same_transaction::TryReport report;
  RecordingTx committed;
  idem::same_transaction::run_try(committed, "test", report, [&] {
    ledger(committed).after_rollback([&] { committed.calls.push_back("write"); });
  });
  CHECK(committed.calls == TxCalls{"begin", "commit"});

  RecordingTx thrown;
  CHECK_THROWS_AS(idem::same_transaction::run_try(thrown, "test", report,
                                                  [&] {
                                                    fail_retryably(thrown);
                                                    ledger(thrown).after_rollback(
                                                        [&] { thrown.calls.push_back("write"); });
                                                    throw std::runtime_error("the body failed");
                                                  }),
                  std::runtime_error);
  CHECK(thrown.calls == TxCalls{"begin", "roll_back_quietly"});
}

TEST_CASE("transaction_try: a write after the rollback that fails leaves the try, named") {
  RecordingTx tx;
  idem::same_transaction::TryReport report;
  int writes = 0;
  try {
    idem::same_transaction::run_try(tx, "idem::test", report, [&] {
      fail_retryably(tx);
      ledger(tx).after_rollback([&] {
        ++writes;
        throw idem::StoreError("the disk is full", false);
      });
    });
    FAIL("the try returned");
  } catch (const idem::StoreError& e) {
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.what(),
               Catch::StartsWith("idem::test: recording the failed attempt after the rollback "
                                 "failed: the disk is full"));
  }
  CHECK(writes == 1);
  // Its own transaction is rolled back; the try's ROLLBACK was already sent.
  CHECK(tx.calls ==
        TxCalls{"begin", "roll_back", "begin", "roll_back_quietly", "roll_back_quietly"});
}

TEST_CASE("transaction_try: a write after the rollback is tried again while it fails transiently") {
  RecordingTx tx;
  idem::same_transaction::TryReport report;
  int writes = 0;
  idem::same_transaction::run_try(tx, "idem::test", report, [&] {
    fail_retryably(tx);
    ledger(tx).after_rollback([&] {
      if (++writes < 3) throw idem::StoreError("deadlock", true);
    });
  });
  CHECK(writes == 3);
  CHECK(tx.calls == TxCalls{"begin", "roll_back", "begin", "roll_back_quietly", "begin",
                            "roll_back_quietly", "begin", "commit"});

  RecordingTx stuck;
  CHECK_THROWS_WITH(idem::same_transaction::run_try(stuck, "idem::test", report,
                                                    [&] {
                                                      fail_retryably(stuck);
                                                      ledger(stuck).after_rollback([] {
                                                        throw idem::StoreError("deadlock", true);
                                                      });
                                                    }),
                    Catch::Contains("recording the failed attempt after the rollback gave up"));
}

TEST_CASE("transaction_try: a failed COMMIT of the writes after the rollback leaves the try") {
  RecordingTx tx;
  tx.fail_commit = true;
  idem::same_transaction::TryReport report;
  CHECK_THROWS_AS(idem::same_transaction::run_try(tx, "test", report,
                                                  [&] {
                                                    fail_retryably(tx);
                                                    ledger(tx).after_rollback([] {});
                                                  }),
                  idem::StoreError);
  CHECK(tx.calls ==
        TxCalls{"begin", "roll_back", "begin", "commit", "roll_back_quietly", "roll_back_quietly"});
}

namespace {

// The kinds and messages of the events a TransactionTries reported.
struct TriesObserver final : idem::Observer {
  std::vector<std::string> seen;
  void on_event(const idem::Event& e) noexcept override {
    seen.push_back(std::string(idem::to_string(e.kind)) + ": " + e.error->what());
  }
};

const idem::TransactionParams three_tries{
    .retry = {.max_attempts = 3, .backoff = idem::Duration{1}, .max_backoff = idem::Duration{1}}};

}  // namespace

TEST_CASE(
    "TransactionTries: a retryable failure runs the body again - reported - until it gives up") {
  TriesObserver observer;
  idem::same_transaction::TransactionTries tries(three_tries, "idem::test::with_transaction");
  for (int n = 1; n <= 2; ++n) {
    tries.next_try().observer = &observer;
    CHECK(idem_test::failed_try(tries, idem::StoreError("deadlock", true)) >= idem::Duration{1});
  }
  tries.next_try().observer = &observer;
  CHECK_THROWS_WITH(idem_test::failed_try(tries, idem::StoreError("deadlock", true)),
                    "idem::test::with_transaction: gave up after 3 tries: deadlock");
  CHECK(observer.seen == std::vector<std::string>{
                             "transaction_retried: deadlock", "transaction_retried: deadlock",
                             "store_error: idem::test::with_transaction: gave up after 3 tries: "
                             "deadlock"});
}

TEST_CASE(
    "TransactionTries: a failure that is not retryable leaves at once - reported - as it is") {
  TriesObserver observer;
  idem::same_transaction::TransactionTries tries(three_tries, "idem::test::with_transaction");
  tries.next_try().observer = &observer;
  CHECK_THROWS_WITH(idem_test::failed_try(tries, idem::StoreError("duplicate entry", false)),
                    "duplicate entry");
  CHECK(observer.seen == std::vector<std::string>{"store_error: duplicate entry"});
}

TEST_CASE("TransactionTries: each try reports to its own claims' observer") {
  TriesObserver first;
  idem::same_transaction::TransactionTries tries(three_tries, "idem::test::with_transaction");
  tries.next_try().observer = &first;
  (void)idem_test::failed_try(tries, idem::StoreError("deadlock", true));
  // The next try made no claim before it failed: nobody to tell.
  CHECK(tries.next_try().observer == nullptr);
  (void)idem_test::failed_try(tries, idem::StoreError("lock wait", true));
  CHECK(first.seen == std::vector<std::string>{"transaction_retried: deadlock"});
}

TEST_CASE("TransactionTries: the retry budget is validated before the first try") {
  CHECK_THROWS_WITH(
      idem::same_transaction::TransactionTries(
          idem::TransactionParams{.retry = {.max_attempts = 0}}, "idem::sqlite::with_transaction"),
      Catch::StartsWith("idem::sqlite::with_transaction: max_attempts must be at least 1"));
}

TEST_CASE("TryEnd: the steps that end a try, without I/O") {
  using idem::same_transaction::ClaimLedger;
  using Step = idem::same_transaction::TryEnd::Step;
  ClaimLedger l;
  l.claimed(claimed_key, claimed_ticket);

  SECTION("a finished claim commits") {
    l.ended(claimed_key, claimed_ticket, ClaimLedger::State::succeeded);
    idem::same_transaction::TryEnd end(l, "test");
    CHECK(end.start() == Step::commit);
    CHECK(end.done(Step::commit) == Step::done);
    CHECK(end.committed());
  }
  SECTION("a retryable claim rolls back, and nothing waits for the rollback") {
    l.ended(claimed_key, claimed_ticket, ClaimLedger::State::retryable);
    idem::same_transaction::TryEnd end(l, "test");
    CHECK(end.start() == Step::roll_back);
    CHECK(end.done(Step::roll_back) == Step::done);
    CHECK_FALSE(end.committed());
  }
  SECTION("writes that wait for the rollback come after it") {
    l.ended(claimed_key, claimed_ticket, ClaimLedger::State::retryable);
    l.after_rollback([] {});
    idem::same_transaction::TryEnd end(l, "test");
    CHECK(end.start() == Step::roll_back);
    CHECK(end.done(Step::roll_back) == Step::write_after_rollback);
    CHECK(end.done(Step::write_after_rollback) == Step::done);
  }
  SECTION("an abandoned claim ends nothing: the try throws before any step") {
    l.ended(claimed_key, claimed_ticket, ClaimLedger::State::abandoned);
    idem::same_transaction::TryEnd end(l, "test");
    CHECK_THROWS_AS(end.start(), idem::UsageError);
  }
}
