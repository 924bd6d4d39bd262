// idem::same_transaction::ClaimLedger (idem/same_transaction/claim_ledger.hpp): the rules both
// bound stores (the blocking BoundSqlStore and idem::mysql's coroutine AsyncBoundStore) take from
// it: how a finished claim ended, and when the transaction may commit.
#include <catch2/catch.hpp>

#include <idem/same_transaction/claim_ledger.hpp>

namespace {

using idem::same_transaction::ClaimLedger;

const idem::Key ledger_key{"PAY", "L-1"};
const idem::Ticket ledger_ticket{3, "owner"};

}  // namespace

TEST_CASE("ClaimLedger: a written result ends its claim as succeeded, failed or retryable") {
  CHECK(ClaimLedger::finished_state(idem::Status::succeeded, false) ==
        ClaimLedger::State::succeeded);
  CHECK(ClaimLedger::finished_state(idem::Status::failed, false) == ClaimLedger::State::failed);
  CHECK(ClaimLedger::finished_state(idem::Status::failed, true) == ClaimLedger::State::retryable);
}

TEST_CASE("ClaimLedger: check_committable names the claim that forbids the commit") {
  ClaimLedger ledger;
  CHECK_NOTHROW(ledger.check_committable("idem::test"));  // no claim: nothing forbids it
  ledger.claimed(ledger_key, ledger_ticket);
  CHECK_FALSE(ledger.committable());
  CHECK_THROWS_WITH(ledger.check_committable("idem::test"),
                    Catch::StartsWith("idem::test: do not commit this transaction: the claim on "
                                      "PAY/L-1 (fence 3)"));
  ledger.ended(ledger_key, ledger_ticket, ClaimLedger::finished_state(idem::Status::failed, false));
  CHECK(ledger.committable());
  CHECK_NOTHROW(ledger.check_committable("idem::test"));
}

TEST_CASE("ClaimLedger: a retryable result forbids the commit, a permanent one allows it") {
  ClaimLedger ledger;
  ledger.claimed(ledger_key, ledger_ticket);
  ledger.ended(ledger_key, ledger_ticket, ClaimLedger::finished_state(idem::Status::failed, true));
  CHECK_FALSE(ledger.committable());
  CHECK_THROWS_AS(ledger.check_committable("idem::test"), idem::UsageError);
}
