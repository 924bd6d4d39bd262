// idem/backend/steps.hpp's OperationTries: how a store operation on pooled connections judges a
// failed try, in both skeletons. (ClaimSteps, FinishSteps and the others are driven through a
// scripted backend in store_skeleton_test.cpp and against servers in mysql/ and sqlite/steps_test.)
#include <catch2/catch.hpp>

#include <string>

#include <idem/backend/steps.hpp>

#include "../support/failed_try.hpp"

using namespace std::chrono_literals;

namespace {

// Classifies by the error's code: 1 fatal, 2 reply lost, anything else transient.
idem::backend::FailureKind by_code(const idem::StoreError& e) {
  switch (e.diagnostics().code) {
    case 1:
      return idem::backend::FailureKind::fatal;
    case 2:
      return idem::backend::FailureKind::reply_lost;
    default:
      return idem::backend::FailureKind::transient;
  }
}

const idem::RetryPolicy three_quick{.max_attempts = 3, .backoff = 1ms, .max_backoff = 1ms};

}  // namespace

TEST_CASE("OperationTries: a fatal failure is rethrown as it is - at once") {
  idem::backend::OperationTries tries(three_quick, "idem::test", "claim", &by_code);
  try {
    (void)idem_test::failed_try(tries, idem::StoreError("syntax", false, {1, {}, {}, false}));
    FAIL("no exception");
  } catch (const idem::StoreError& e) {
    CHECK(std::string(e.what()) == "syntax");
  }
  CHECK(tries.attempt() == 1);
}

TEST_CASE("OperationTries: a transient failure is tried again - certain - until the last try") {
  idem::backend::OperationTries tries(three_quick, "idem::test", "claim", &by_code);
  CHECK(idem_test::failed_try(tries, idem::StoreError("deadlock", true, {3, {}, {}, false})) >=
        1ms);
  CHECK(idem_test::failed_try(tries, idem::StoreError("deadlock", true, {3, {}, {}, false})) >=
        1ms);
  CHECK(tries.attempt() == 3);
  CHECK_FALSE(tries.uncertain());
  CHECK_THROWS_WITH(
      idem_test::failed_try(tries, idem::StoreError("deadlock", true, {3, {}, {}, false})),
      "idem::test: claim gave up after 3 tries: deadlock");
}

TEST_CASE("OperationTries: after a lost reply every later try is uncertain") {
  idem::backend::OperationTries tries(three_quick, "idem::test", "record", &by_code);
  (void)idem_test::failed_try(tries, idem::StoreError("gone away", true, {2, {}, {}, false}));
  CHECK(tries.uncertain());
  (void)idem_test::failed_try(tries, idem::StoreError("deadlock", true, {3, {}, {}, false}));
  CHECK(tries.uncertain());
}
