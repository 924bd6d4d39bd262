// idem::ConsumerPolicy: the delay a failed message's redelivery waits, and the attempts a key
// may have, by biz_type.
#include <chrono>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include <catch2/catch.hpp>
#include <idem/consumer_policy.hpp>

using namespace std::chrono_literals;

TEST_CASE("consumer policy: the delay doubles with each failed attempt up to max_delay") {
  const idem::ConsumerPolicy p{.first_delay = 500ms, .max_delay = 3s};
  CHECK(p.delay_after(0) == 500ms);  // nothing failed yet (a message another consumer holds)
  CHECK(p.delay_after(1) == 500ms);
  CHECK(p.delay_after(2) == 1s);
  CHECK(p.delay_after(3) == 2s);
  CHECK(p.delay_after(4) == 3s);
  CHECK(p.delay_after(std::numeric_limits<std::uint32_t>::max()) == 3s);
  // A zero first delay stays zero (and does not loop through every attempt).
  const idem::ConsumerPolicy now{.first_delay = 0ms, .max_delay = 0ms};
  CHECK(now.delay_after(std::numeric_limits<std::uint32_t>::max()) == 0ms);
  CHECK(idem::ConsumerPolicy{}.delay_after(1) == 1s);
  CHECK(idem::ConsumerPolicy{}.delay_after(100) == 5min);
}

TEST_CASE("consumer policy: a biz_type's own limit wins over max_attempts") {
  const idem::ConsumerPolicy p{.max_attempts = 5, .max_attempts_by_biz_type = {{"refund", 12}}};
  CHECK(p.max_attempts_for("refund") == 12);
  CHECK(p.max_attempts_for("order.paid") == 5);
  CHECK(idem::ConsumerPolicy{}.max_attempts_for("any") == 0);  // no limit
}

TEST_CASE("consumer policy: delays that break their rules are typed errors") {
  CHECK_NOTHROW(idem::validate(idem::ConsumerPolicy{}));
  CHECK_THROWS_AS(idem::validate(idem::ConsumerPolicy{.first_delay = -1ms}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(idem::ConsumerPolicy{.store_outage = -1ms}),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(idem::validate(idem::ConsumerPolicy{.first_delay = 2s, .max_delay = 1s}),
                  idem::InvalidArgument);
}

TEST_CASE("through_store_outage: runs again while the store fails transiently, within its time") {
  const idem::ConsumerPolicy policy{.store_outage = 10s};
  int tries = 0;
  const int answer = idem::through_store_outage(policy, [&] {
    if (++tries < 4) throw idem::StoreError("the database is restarting", true);
    return 42;
  });
  CHECK(answer == 42);
  CHECK(tries == 4);

  // An error that will not pass by waiting, and anything else, propagate at once.
  tries = 0;
  CHECK_THROWS_AS(idem::through_store_outage(policy,
                                             [&] {
                                               ++tries;
                                               throw idem::StoreError("access denied", false);
                                             }),
                  idem::StoreError);
  CHECK_THROWS_AS(idem::through_store_outage(policy,
                                             [&] {
                                               ++tries;
                                               throw std::runtime_error("not the store");
                                             }),
                  std::runtime_error);
  CHECK(tries == 2);

  // Past store_outage, the last error propagates; 0 tries once.
  tries = 0;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(idem::through_store_outage(idem::ConsumerPolicy{.store_outage = 200ms},
                                             [&] {
                                               ++tries;
                                               throw idem::StoreError("down", true);
                                             }),
                  idem::StoreError);
  CHECK(std::chrono::steady_clock::now() - start >= 200ms);
  CHECK(tries > 1);
  tries = 0;
  CHECK_THROWS_AS(idem::through_store_outage(idem::ConsumerPolicy{},
                                             [&] {
                                               ++tries;
                                               throw idem::StoreError("down", true);
                                             }),
                  idem::StoreError);
  CHECK(tries == 1);
}
