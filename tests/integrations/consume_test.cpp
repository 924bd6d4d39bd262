// idem::consume and idem::consume_batch: the at-least-once rules, and a redelivering queue
// drained by racing consumers that must run every business key exactly once.
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/batch.hpp>
#include <idem/consume.hpp>
#include <idem/fingerprint.hpp>
#include <idem/memory_store.hpp>

#include "../support/batch_window.hpp"
#include "../support/forwarding_store.hpp"

using namespace std::chrono_literals;
using idem::Ack;
using idem::Verdict;

namespace {

struct ConsumeFixture {
  idem::ManualClock clock;
  idem::MemoryStore store{[this] { return clock.now(); }};
};

const idem::Key order{"order.paid", "O-1001"};

}  // namespace

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a success commits, its duplicates commit without running") {
  int runs = 0;
  const Ack first = idem::consume(store, order, "fp", [&] { ++runs; });
  CHECK(first == Ack::commit);
  CHECK(first.verdict == Verdict::acquired);
  CHECK(first.reason.empty());
  CHECK(store.find(order)->snapshot == "null");  // a void business stores null

  const Ack again = idem::consume(store, order, "fp", [&] { ++runs; });
  CHECK(again == Ack::commit);
  CHECK(again.verdict == Verdict::replayed);
  CHECK(runs == 1);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a value returned by the business is the stored snapshot") {
  CHECK(idem::consume(store, order, "fp", [] {
          return nlohmann::json{{"credited", 42}};
        }) == Ack::commit);
  CHECK(store.find(order)->snapshot == R"({"credited":42})");
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: in progress elsewhere is retry_later, and nothing runs") {
  const auto held = store.claim(order, "fp", {});
  REQUIRE(held.verdict == Verdict::acquired);
  int runs = 0;
  const Ack ack = idem::consume(store, order, "fp", [&] { ++runs; });
  CHECK(ack == Ack::retry_later);
  CHECK(ack.verdict == Verdict::in_progress);
  CHECK_FALSE(ack.reason.empty());
  CHECK(runs == 0);
  // Once the other consumer commits, the redelivery commits without running.
  store.complete(order, held.record.ticket, "true");
  CHECK(idem::consume(store, order, "fp", [&] { ++runs; }) == Ack::commit);
  CHECK(runs == 0);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: an exception is retry_later, and the redelivery runs again") {
  int runs = 0;
  const Ack failed = idem::consume(store, order, "fp", [&] {
    ++runs;
    throw std::runtime_error("ledger unavailable");
  });
  CHECK(failed == Ack::retry_later);
  CHECK(failed.verdict == Verdict::acquired);
  CHECK(failed.reason == "ledger unavailable");
  const auto stored = store.find(order);
  CHECK(stored->status == idem::Status::failed);
  CHECK(stored->retryable);

  const Ack retried = idem::consume(store, order, "fp", [&] { ++runs; });
  CHECK(retried == Ack::commit);
  CHECK(retried.verdict == Verdict::acquired);
  CHECK(runs == 2);
  CHECK(store.find(order)->attempts == 2);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a permanent failure is recorded and committed, then replayed") {
  int runs = 0;
  const Ack declined = idem::consume(store, order, "fp", [&] {
    ++runs;
    throw idem::PermanentFailure({{"error", "account_closed"}});
  });
  CHECK(declined == Ack::commit);
  CHECK(declined.verdict == Verdict::acquired);
  const Ack dup = idem::consume(store, order, "fp", [&] { ++runs; });
  CHECK(dup == Ack::commit);
  CHECK(dup.verdict == Verdict::replayed);
  CHECK(dup.reason == "replayed a recorded permanent failure");
  CHECK(runs == 1);
  CHECK_FALSE(store.find(order)->retryable);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: EffectUnknown is retry_later, and the redelivery waits for a repair") {
  int runs = 0;
  const Ack unsure = idem::consume(store, order, "fp", [&] {
    ++runs;
    throw idem::EffectUnknown("the ledger service timed out after the credit was sent");
  });
  CHECK(unsure == Ack::retry_later);
  CHECK(unsure.verdict == Verdict::acquired);
  CHECK(store.find(order)->status == idem::Status::outcome_unknown);
  clock.advance(1h);  // past any lease: still not run again
  const Ack redelivered = idem::consume(store, order, "fp", [&] { ++runs; });
  CHECK(redelivered == Ack::retry_later);
  CHECK(redelivered.verdict == Verdict::outcome_unknown);
  CHECK(runs == 1);
  store.repair(order, {.action = idem::RepairAction::release,
                       .fence = store.find(order)->ticket.fence,
                       .reason = "the ledger shows no credit"});
  CHECK(idem::consume(store, order, "fp", [&] { ++runs; }) == Ack::commit);
  CHECK(runs == 2);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: the same key with another payload is dead-lettered as a conflict") {
  CHECK(idem::consume(store, order, "fp-a", [] {}) == Ack::commit);
  int runs = 0;
  const Ack ack = idem::consume(store, order, "fp-b", [&] { ++runs; });
  CHECK(ack == Ack::dead_letter);
  CHECK(ack.verdict == Verdict::conflict);
  CHECK_FALSE(ack.reason.empty());
  CHECK(runs == 0);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a crashed consumer's message runs again after its lease") {
  const idem::Options options{.lease = 5s, .ttl = 1h};
  REQUIRE(store.claim(order, "fp", options).verdict == Verdict::acquired);  // then it died
  int runs = 0;
  CHECK(idem::consume(
            store, order, "fp", [&] { ++runs; }, options) == Ack::retry_later);
  clock.advance(6s);
  const Ack ack = idem::consume(
      store, order, "fp", [&] { ++runs; }, options);
  CHECK(ack == Ack::commit);
  CHECK(ack.verdict == Verdict::acquired);
  CHECK(runs == 1);
}

TEST_CASE_METHOD(ConsumeFixture, "consume: a result that cannot be stored is a permanent failure") {
  int runs = 0;
  auto too_big = [&] {
    ++runs;
    return std::string(idem::max_snapshot_bytes + 1, 'x');
  };
  CHECK_THROWS_AS(idem::consume(store, order, "fp", too_big), idem::InvalidArgument);
  CHECK(store.find(order)->status == idem::Status::failed);
  CHECK_FALSE(store.find(order)->retryable);
  CHECK(idem::consume(store, order, "fp", too_big) == Ack::commit);  // replays, never reruns
  CHECK(runs == 1);
}

namespace {

struct Parcel {
  std::optional<int> weight;
};
void to_json(nlohmann::json& j, const Parcel& p) {
  j = p.weight.value();  // std::bad_optional_access for an empty optional
}

}  // namespace

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a result whose to_json throws any exception is a permanent failure") {
  int runs = 0;
  auto weigh = [&] {
    ++runs;
    return Parcel{};
  };
  CHECK_THROWS_AS(idem::consume(store, order, "fp", weigh), idem::InvalidArgument);
  CHECK(store.find(order)->status == idem::Status::failed);
  CHECK_FALSE(store.find(order)->retryable);
  const Ack again = idem::consume(store, order, "fp", weigh);
  CHECK(again == Ack::commit);
  CHECK(again.verdict == Verdict::replayed);
  CHECK(runs == 1);
}

TEST_CASE_METHOD(ConsumeFixture, "consume: bad input is a typed error and changes nothing") {
  int runs = 0;
  CHECK_THROWS_AS(idem::consume(store, order, "two words", [&] { ++runs; }), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::consume(store, order, "fp", [&] { ++runs; }, {.lease = -1ms}),
                  idem::InvalidArgument);
  CHECK(runs == 0);
  CHECK_FALSE(store.find(order));
}

TEST_CASE_METHOD(ConsumeFixture, "consume_batch: each message gets consume's answer") {
  // Stored before the batch: O-1 succeeded, O-2 in progress elsewhere, O-3 used with payload a.
  CHECK(idem::consume(store, idem::Key{"order.paid", "O-1"}, "fp", [] {}) == Ack::commit);
  REQUIRE(store.claim(idem::Key{"order.paid", "O-2"}, "fp", {}).verdict == Verdict::acquired);
  CHECK(idem::consume(store, idem::Key{"order.paid", "O-3"}, "a", [] {}) == Ack::commit);

  const std::vector<idem::ClaimRequest> batch{
      {idem::Key{"order.paid", "O-1"}, "fp"},  // 0 replay
      {idem::Key{"order.paid", "O-2"}, "fp"},  // 1 in progress
      {idem::Key{"order.paid", "O-3"}, "b"},   // 2 conflict
      {idem::Key{"order.paid", "O-4"}, "fp"},  // 3 runs
      {idem::Key{"order.paid", "O-5"}, "fp"},  // 4 runs and throws
      {idem::Key{"order.paid", "O-6"}, "fp"},  // 5 runs, permanent failure
      {idem::Key{"order.paid", "O-4"}, "fp"},  // 6 repeat of 3 in the same batch
  };
  std::vector<std::size_t> ran;
  const auto acks = idem::consume_batch(store, batch, [&](std::size_t i) {
    ran.push_back(i);
    if (i == 4) throw std::runtime_error("ledger unavailable");
    if (i == 5) throw idem::PermanentFailure({{"error", "account_closed"}});
  });
  REQUIRE(acks.size() == batch.size());
  CHECK(ran == std::vector<std::size_t>{3, 4, 5});
  CHECK((acks[0] == Ack::commit && acks[0].verdict == Verdict::replayed));
  CHECK((acks[1] == Ack::retry_later && acks[1].verdict == Verdict::in_progress));
  CHECK((acks[2] == Ack::dead_letter && acks[2].verdict == Verdict::conflict));
  CHECK((acks[3] == Ack::commit && acks[3].verdict == Verdict::acquired));
  CHECK((acks[4] == Ack::retry_later && acks[4].verdict == Verdict::acquired));
  CHECK((acks[5] == Ack::commit && acks[5].verdict == Verdict::acquired));
  // The repeat was claimed after message 3's claim and before it ran: in progress.
  CHECK((acks[6] == Ack::retry_later && acks[6].verdict == Verdict::in_progress));
  CHECK(store.find(idem::Key{"order.paid", "O-4"})->status == idem::Status::succeeded);
  CHECK(store.find(idem::Key{"order.paid", "O-5"})->retryable);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume_batch: a bad message refuses the whole batch before writing") {
  const std::vector<idem::ClaimRequest> batch{{idem::Key{"order.paid", "O-1"}, "fp"},
                                              {idem::Key{"order.paid", "O-2"}, "bad fp"}};
  int runs = 0;
  CHECK_THROWS_AS(idem::consume_batch(store, batch, [&](std::size_t) { ++runs; }),
                  idem::InvalidArgument);
  CHECK(runs == 0);
  CHECK_FALSE(store.find(idem::Key{"order.paid", "O-1"}));
}

TEST_CASE(
    "consume_batch: a message reached after half its lease is released, not run, so a "
    "consumer that took its expired claim over is the only one to run it") {
  idem_test::BatchWindowCase c;
  auto apply = [&](std::size_t i) {
    if (!c.ran(i)) return;
    std::this_thread::sleep_for(c.past_half);
    c.overtake();
  };
  c.check_first(idem::consume_batch(c.memory, c.batch, apply, c.options));
  c.check_redelivered(idem::consume_batch(c.memory, c.batch, apply, c.options));
}

namespace {

// An at-least-once queue: a delivery that is not acknowledged comes back, and a delivery
// that is acknowledged may still come back (redelivery_rate) - a lost ack, a rebalance.
class RedeliveringQueue {
 public:
  RedeliveringQueue(int messages, double redelivery_rate, unsigned seed)
      : rate_(redelivery_rate), rng_(seed) {
    for (int i = 0; i < messages; ++i)
      queue_.push_back(i);
  }
  bool pop(int& message) {
    std::lock_guard lock(mutex_);
    if (queue_.empty()) return false;
    message = queue_.front();
    queue_.pop_front();
    return true;
  }
  void ack(int message, bool commit) {
    std::lock_guard lock(mutex_);
    if (!commit || std::uniform_real_distribution<>(0, 1)(rng_) < rate_) {
      queue_.push_back(message);
      ++redeliveries_;
    }
  }
  int redeliveries() {
    std::lock_guard lock(mutex_);
    return redeliveries_;
  }

 private:
  std::mutex mutex_;
  std::deque<int> queue_;
  double rate_;
  std::mt19937 rng_;
  int redeliveries_ = 0;
};

}  // namespace

TEST_CASE("consume: racing consumers drain a redelivering queue, each key runs once",
          "[consume][race]") {
  idem::MemoryStore store;
  constexpr int messages = 2000;
  RedeliveringQueue queue(messages, 0.12, 7);
  std::vector<std::atomic<int>> runs(messages);
  std::atomic<int> failures_injected{0};
  std::atomic<int> unexpected{0};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 8; ++t) {
    consumers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      int m = 0;
      while (queue.pop(m)) {
        try {
          const Ack ack =
              idem::consume(store, idem::Key{"order.paid", "O-" + std::to_string(m)}, "fp", [&] {
                if (rng() % 50 == 0) {  // a transient business failure now and then
                  failures_injected++;
                  throw std::runtime_error("transient");
                }
                runs[static_cast<std::size_t>(m)]++;
              });
          queue.ack(m, ack == Ack::commit);
        } catch (...) {
          unexpected++;
          queue.ack(m, false);
        }
      }
    });
  }
  for (auto& c : consumers)
    c.join();
  CHECK(unexpected == 0);
  CHECK(queue.redeliveries() > messages / 10);
  CHECK(failures_injected > 0);
  int wrong = 0;
  for (auto& r : runs)
    wrong += r == 1 ? 0 : 1;
  CHECK(wrong == 0);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a store error from the business propagates, the key stays open") {
  // E.g. a deadlock of the business's own SQL in same-transaction mode: with_transaction must
  // see it to run the transaction again, so consume does not turn it into an Ack.
  int runs = 0;
  CHECK_THROWS_AS(idem::consume(store, order, "fp",
                                [&] {
                                  ++runs;
                                  throw idem::StoreError("deadlock found", true);
                                }),
                  idem::StoreError);
  const auto stored = store.find(order);
  CHECK(stored->status == idem::Status::failed);
  CHECK(stored->retryable);  // recorded by the guard: the redelivery runs again
  CHECK(idem::consume(store, order, "fp", [&] { ++runs; }) == Ack::commit);
  CHECK(runs == 2);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a retryable failure asks for a redelivery later - longer each attempt") {
  const idem::ConsumerPolicy policy{.first_delay = 1s, .max_delay = 5s};
  const idem::Options options{.consumer = &policy};
  std::vector<idem::Duration> delays;
  for (int i = 0; i < 5; ++i) {
    const Ack ack = idem::consume(
        store, order, "fp", [] { throw std::runtime_error("ledger down"); }, options);
    REQUIRE(ack == Ack::retry_later);
    delays.push_back(ack.delay);
  }
  CHECK(delays == std::vector<idem::Duration>{1s, 2s, 4s, 5s, 5s});
  CHECK(store.find(order)->attempts == 5);
  // Another consumer's claim: wait the first delay; an unknown outcome: as for its attempts.
  const idem::Key held{"order.paid", "held"};
  REQUIRE(store.claim(held, "fp", {}).verdict == Verdict::acquired);
  CHECK(idem::consume(
            store, held, "fp", [] {}, options)
            .delay == 1s);
  const idem::Key unsure{"order.paid", "unsure"};
  idem::consume(
      store, unsure, "fp", [] { throw idem::EffectUnknown("timed out"); }, options);
  const Ack waiting = idem::consume(
      store, unsure, "fp", [] {}, options);
  CHECK(waiting.verdict == Verdict::outcome_unknown);
  CHECK(waiting.delay == 1s);
  // Without a policy: the default one.
  CHECK(idem::consume(store, order, "fp", [] { throw std::runtime_error("down"); }).delay ==
        idem::ConsumerPolicy{}.delay_after(6));
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a poison message is dead-lettered on its last attempt - the key "
                 "records a permanent failure") {
  const idem::ConsumerPolicy policy{.max_attempts = 3, .max_attempts_by_biz_type = {{"refund", 5}}};
  const idem::Options options{.consumer = &policy};
  int runs = 0;
  const auto poison = [&] {
    ++runs;
    throw std::runtime_error("cannot parse the ledger's answer");
  };
  CHECK(idem::consume(store, order, "fp", poison, options) == Ack::retry_later);
  CHECK(idem::consume(store, order, "fp", poison, options) == Ack::retry_later);
  const Ack last = idem::consume(store, order, "fp", poison, options);
  CHECK(last == Ack::dead_letter);
  CHECK(last.verdict == Verdict::acquired);
  CHECK(last.reason == "gave up after 3 attempts: cannot parse the ledger's answer");
  CHECK(runs == 3);
  const auto stored = store.find(order);
  CHECK(stored->status == idem::Status::failed);
  CHECK_FALSE(stored->retryable);
  CHECK(nlohmann::json::parse(stored->snapshot) ==
        nlohmann::json{{"error", "idem.attempts_exhausted"},
                       {"attempts", 3},
                       {"detail", "cannot parse the ledger's answer"}});
  // A copy delivered later replays the failure: nothing runs, and it is dead-lettered again
  // (the consumer that gave up may have died before its dead letter went out).
  const Ack copy = idem::consume(store, order, "fp", poison, options);
  CHECK(copy == Ack::dead_letter);
  CHECK(copy.verdict == Verdict::replayed);
  CHECK(copy.reason == "replayed: gave up after 3 attempts");
  CHECK(runs == 3);
  // Another permanent failure (the business's own PermanentFailure) is acknowledged.
  const idem::Key declined{"order.paid", "O-declined"};
  CHECK(idem::consume(
            store, declined, "fp",
            [] {
              throw idem::PermanentFailure({{"error", "declined"}});
            },
            options) == Ack::commit);
  const Ack declined_copy = idem::consume(
      store, declined, "fp", [] { return 1; }, options);
  CHECK(declined_copy == Ack::commit);
  CHECK(declined_copy.verdict == Verdict::replayed);
  // Another biz_type has its own limit.
  const idem::Key refund{"refund", "R-1"};
  int refund_runs = 0;
  Ack a;
  do {
    a = idem::consume(
        store, refund, "fp",
        [&] {
          ++refund_runs;
          throw std::runtime_error("no");
        },
        options);
  } while (a == Ack::retry_later);
  CHECK(a == Ack::dead_letter);
  CHECK(refund_runs == 5);
}

TEST_CASE("consume: consumers racing on a poison message run it exactly max_attempts times") {
  idem::MemoryStore store;
  const idem::ConsumerPolicy policy{.max_attempts = 4};
  const idem::Options options{.consumer = &policy};
  std::atomic<int> runs{0}, dead_letters{0}, replays{0};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 8; ++t) {
    consumers.emplace_back([&] {
      // Each consumer gets the message redelivered until it is acknowledged one way or the
      // other.
      for (;;) {
        const Ack ack = idem::consume(
            store, order, "fp",
            [&] {
              ++runs;
              std::this_thread::sleep_for(1ms);
              throw std::runtime_error("poison");
            },
            options);
        if (ack == Ack::dead_letter) ++dead_letters;
        if (ack.verdict == Verdict::replayed) ++replays;
        if (ack != Ack::retry_later) break;
      }
    });
  }
  for (auto& c : consumers)
    c.join();
  CHECK(runs.load() == 4);
  CHECK(replays.load() == 7);
  CHECK(dead_letters.load() == 8);  // the one that gave up, and every copy that replayed it
  CHECK(store.find(order)->attempts == 4);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a non-retryable error of the business's own SQL is a failed attempt") {
  // A value out of range fails the same way on every delivery: counted and given up on, not
  // thrown back at the consumer as if the store were down.
  const idem::ConsumerPolicy policy{.max_attempts = 2};
  const idem::Options options{.consumer = &policy};
  const auto out_of_range = [] {
    throw idem::StoreError("Out of range value for column 'amount' at row 1", false);
  };
  const Ack first = idem::consume(store, order, "fp", out_of_range, options);
  CHECK(first == Ack::retry_later);
  CHECK_THAT(first.reason, Catch::StartsWith("the business's SQL failed: Out of range"));
  CHECK(idem::consume(store, order, "fp", out_of_range, options) == Ack::dead_letter);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a message that fails its check is dead-lettered without touching "
                 "the key - the genuine one runs") {
  // A forged copy of a payment (same trade number, amount 1) must not record a failure under
  // the key before the genuine payment comes.
  struct Payment {
    std::string trade_no;
    int amount;
    std::string signature;
  };
  const auto signed_by_gateway = [](const Payment& p) {
    return p.signature == "sig:" + p.trade_no + ":" + std::to_string(p.amount);
  };
  int credited = 0;
  const auto deliver = [&](const Payment& p) {
    return idem::consume(
        store, idem::Key{"payment.credit", p.trade_no},
        idem::fingerprint(nlohmann::json{{"amount", p.amount}}),
        [&] {
          if (!signed_by_gateway(p)) throw idem::InvalidMessage("the signature does not match");
        },
        [&] { credited += p.amount; });
  };
  const Ack forged = deliver({"T-77", 1, "sig:forged"});
  CHECK(forged == Ack::dead_letter);
  CHECK_FALSE(forged.verdict.has_value());
  CHECK(forged.reason == "the signature does not match");
  CHECK_FALSE(store.find(idem::Key{"payment.credit", "T-77"}));
  const Ack genuine = deliver({"T-77", 29900, "sig:T-77:29900"});
  CHECK(genuine == Ack::commit);
  CHECK(genuine.verdict == Verdict::acquired);
  CHECK(credited == 29900);
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a bad consumer policy is a typed error and claims nothing") {
  const idem::ConsumerPolicy negative{.first_delay = -1s};
  CHECK_THROWS_AS(idem::consume(store, order, "fp", [] {}, {.consumer = &negative}),
                  idem::InvalidArgument);
  const idem::ConsumerPolicy inverted{.first_delay = 10s, .max_delay = 1s};
  CHECK_THROWS_AS(idem::consume(store, order, "fp", [] {}, {.consumer = &inverted}),
                  idem::InvalidArgument);
  CHECK_FALSE(store.find(order));
}

namespace {

// A MemoryStore behind a database that is down for its first `down_for` claims: each fails
// with a retryable StoreError, as a store does once its own retries are spent.
struct RestartingStore : idem_test::ForwardingStore {
  int down_for = 0;
  bool retryable = true;
  int claims = 0;
  idem::ClaimResult claim(const idem::Key& k, std::string_view fp, const idem::Options& o) {
    if (++claims <= down_for) throw idem::StoreError("the database is restarting", retryable);
    return inner.claim(k, fp, o);
  }
};

}  // namespace

TEST_CASE(
    "consume: a store outage before the claim is waited out in process when the policy "
    "allows") {
  idem::MemoryStore memory;
  int runs = 0;
  SECTION("within store_outage: no delivery attempt lost") {
    RestartingStore store{{memory}, 4};
    const idem::ConsumerPolicy policy{.store_outage = 10s};
    const Ack ack = idem::consume(store, order, "fp", [&] { ++runs; }, {.consumer = &policy});
    CHECK(ack == Ack::commit);
    CHECK(store.claims == 5);
    CHECK(runs == 1);
  }
  SECTION("longer than store_outage: thrown, nothing ran") {
    RestartingStore store{{memory}, 1'000'000};
    const idem::ConsumerPolicy policy{.store_outage = 300ms};
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(idem::consume(store, order, "fp", [&] { ++runs; }, {.consumer = &policy}),
                    idem::StoreError);
    CHECK(std::chrono::steady_clock::now() - start >= 300ms);
    CHECK(store.claims > 1);
    CHECK(runs == 0);
  }
  SECTION("without the policy, or for an error that will not pass: thrown at once") {
    RestartingStore store{{memory}, 1};
    CHECK_THROWS_AS(idem::consume(store, order, "fp", [&] { ++runs; }), idem::StoreError);
    CHECK(store.claims == 1);
    RestartingStore refusing{{memory}, 1, false};
    const idem::ConsumerPolicy policy{.store_outage = 10s};
    CHECK_THROWS_AS(idem::consume(refusing, order, "fp", [&] { ++runs; }, {.consumer = &policy}),
                    idem::StoreError);
    CHECK(refusing.claims == 1);
    CHECK(runs == 0);
  }
  SECTION("a batch claim too") {
    RestartingStore store{{memory}, 2};
    const idem::ConsumerPolicy policy{.store_outage = 10s};
    const std::vector<idem::ClaimRequest> messages{{order, "fp"},
                                                   {idem::Key{"order.paid", "2"}, ""}};
    const auto acks =
        idem::consume_batch(store, messages, [&](std::size_t) { ++runs; }, {.consumer = &policy});
    CHECK(acks[0] == Ack::commit);
    CHECK(acks[1] == Ack::commit);
    CHECK(runs == 2);
  }
}

TEST_CASE_METHOD(ConsumeFixture,
                 "consume: a consumer that dies before its dead letter went out - the redelivery "
                 "is dead-lettered") {
  const idem::ConsumerPolicy policy{.max_attempts = 2};
  const idem::Options options{.consumer = &policy};
  int runs = 0;
  const auto poison = [&] {
    ++runs;
    throw std::runtime_error("poison");
  };
  CHECK(idem::consume(store, order, "fp", poison, options) == Ack::retry_later);
  // The last attempt records the permanent failure; the consumer dies before it publishes the
  // dead letter and acknowledges, so the broker delivers the message again.
  (void)idem::consume(store, order, "fp", poison, options);
  const Ack redelivered = idem::consume(store, order, "fp", poison, options);
  CHECK(redelivered == Ack::dead_letter);
  CHECK(runs == 2);
  // The same through consume_batch.
  const std::vector<idem::ClaimRequest> batch{{order, "fp"}};
  const std::vector<Ack> acks = idem::consume_batch(
      store, batch, [&](std::size_t) { poison(); }, options);
  CHECK(acks.at(0) == Ack::dead_letter);
  CHECK(runs == 2);
}
