// idem::RetryPolicy, Backoff and retry(): the one retry rule of every store, every
// with_transaction and the guard's wait.

#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/retry.hpp>

using namespace std::chrono_literals;

TEST_CASE("RetryPolicy: validated once, the same way for every caller") {
  CHECK_NOTHROW(idem::validate(idem::RetryPolicy{}, "t"));
  CHECK_NOTHROW(idem::validate(
      idem::RetryPolicy{.max_attempts = 1, .backoff = 1ms, .max_backoff = 1ms}, "t"));
  CHECK_THROWS_AS(idem::validate(idem::RetryPolicy{.max_attempts = 0}, "t"), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(idem::RetryPolicy{.backoff = 0ms}, "t"), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(idem::RetryPolicy{.backoff = -5ms}, "t"), idem::InvalidArgument);
  CHECK_THROWS_WITH(
      idem::validate(idem::RetryPolicy{.backoff = 10ms, .max_backoff = 5ms}, "idem::sqlite::Store"),
      Catch::StartsWith("idem::sqlite::Store: backoff must be at least 1 ms"));
  CHECK(idem::TransactionParams{}.retry.max_attempts == 5);
}

TEST_CASE(
    "Backoff: each pause is the step plus up to as much again - the step doubles to the cap") {
  idem::Backoff b(4ms, 20ms);
  const std::vector<idem::Duration> steps{4ms, 8ms, 16ms, 20ms, 20ms};
  for (const idem::Duration step : steps) {
    const idem::Duration nap = b.next();
    CHECK(nap >= step);
    CHECK(nap <= step * 2);
  }
  // Jittered: many pauses at the same step are not all alike.
  bool differ = false;
  idem::Backoff first(50ms, 50ms);
  const idem::Duration one = first.next();
  for (int i = 0; i < 64 && !differ; ++i)
    differ = first.next() != one;
  CHECK(differ);
}

TEST_CASE("retry: tries until the call returns, judged by on_failure, then gives up") {
  const idem::RetryPolicy fast{.max_attempts = 3, .backoff = 1ms, .max_backoff = 1ms};
  SECTION("a call that succeeds on its second try") {
    int tries = 0;
    const int v = idem::retry(
        fast, "test", "op",
        [&](int n) {
          ++tries;
          if (n == 1) throw idem::StoreError("transient", true);
          return 42;
        },
        [](const idem::StoreError&, int) {});
    CHECK(v == 42);
    CHECK(tries == 2);
  }
  SECTION("on_failure that rethrows ends the call at once") {
    int tries = 0;
    CHECK_THROWS_WITH(idem::retry(
                          fast, "test", "op",
                          [&](int) -> int {
                            ++tries;
                            throw idem::StoreError("permanent", false);
                          },
                          [](const idem::StoreError& e, int) {
                            if (!e.retryable()) throw;
                          }),
                      "permanent");
    CHECK(tries == 1);
  }
  SECTION("after max_attempts failures: a retryable StoreError that says so") {
    int tries = 0;
    try {
      idem::retry(
          fast, "idem::test", "claim",
          [&](int) -> int {
            ++tries;
            throw idem::StoreError("deadlock", true);
          },
          [](const idem::StoreError&, int) {});
      FAIL("no exception");
    } catch (const idem::StoreError& e) {
      CHECK(e.retryable());
      CHECK(std::string(e.what()) == "idem::test: claim gave up after 3 tries: deadlock");
    }
    CHECK(tries == 3);
  }
  SECTION("other exceptions are not retried") {
    int tries = 0;
    CHECK_THROWS_AS(idem::retry(
                        fast, "t", "",
                        [&](int) -> int {
                          ++tries;
                          throw std::runtime_error("business");
                        },
                        [](const idem::StoreError&, int) {}),
                    std::runtime_error);
    CHECK(tries == 1);
  }
}

TEST_CASE("RetryLoop: counts the tries - answers a pause after each but the last - then gives up") {
  const idem::RetryPolicy policy{.max_attempts = 3, .backoff = 2ms, .max_backoff = 4ms};
  idem::backend::RetryLoop loop(policy, "idem::test", "purge_expired");
  const idem::StoreError deadlock("deadlock", true, {1213, {}, {}, false});
  CHECK(loop.attempt() == 1);
  CHECK_FALSE(loop.last());
  const idem::Duration first = loop.failed(deadlock);
  CHECK(first >= 2ms);
  CHECK(first <= 4ms);
  CHECK(loop.attempt() == 2);
  const idem::Duration second = loop.failed(deadlock);
  CHECK(second >= 4ms);
  CHECK(second <= 8ms);
  CHECK(loop.attempt() == 3);
  CHECK(loop.last());
  try {
    (void)loop.failed(deadlock);
    FAIL("no exception after the last try");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK(std::string(e.what()) == "idem::test: purge_expired gave up after 3 tries: deadlock");
    CHECK(e.diagnostics().code == 1213);
  }
  CHECK(loop.attempt() == 3);
}

TEST_CASE("retrying: the blocking driver runs the try again for as long as failed answers") {
  int tries = 0;
  std::vector<std::string> seen;
  const int v = idem::backend::retrying(
      [&] {
        if (++tries < 3) throw idem::StoreError("busy " + std::to_string(tries), true);
        return 7;
      },
      [&](const idem::StoreError& e) {
        seen.emplace_back(e.what());
        return idem::Duration{1};
      });
  CHECK(v == 7);
  CHECK(seen == std::vector<std::string>{"busy 1", "busy 2"});
  SECTION("failed may rethrow the try's own error") {
    CHECK_THROWS_WITH(
        idem::backend::retrying([]() -> int { throw idem::StoreError("fatal", false); },
                                [](const idem::StoreError&) -> idem::Duration { throw; }),
        "fatal");
  }
}

TEST_CASE("retry without a judge: retryable StoreErrors are tried again - nothing else") {
  const idem::RetryPolicy fast{.max_attempts = 4, .backoff = 1ms, .max_backoff = 1ms};
  int tries = 0;
  CHECK(idem::retry(fast, "test", "op", [&](int n) {
          ++tries;
          if (n < 3) throw idem::StoreError("deadlock", true);
          return n;
        }) == 3);
  CHECK(tries == 3);
  tries = 0;
  CHECK_THROWS_WITH(idem::retry(fast, "test", "op",
                                [&](int) -> int {
                                  ++tries;
                                  throw idem::StoreError("syntax error", false);
                                }),
                    "syntax error");
  CHECK(tries == 1);
  CHECK_THROWS_AS(
      idem::retry(idem::RetryPolicy{.max_attempts = 0}, "test", "op", [](int) { return 1; }),
      idem::InvalidArgument);
}
