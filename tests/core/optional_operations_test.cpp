// The optional store operations of idem/optional_operations.hpp: which stores have them, and that
// the guard, claim_batch and consume_batch use each one exactly when a store has it.
#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/batch.hpp>
#include <idem/consume.hpp>
#include <idem/guard.hpp>
#include <idem/memory_store.hpp>
#include <idem/optional_operations.hpp>

using namespace std::chrono_literals;

namespace {

// The plain contract, delegated to a MemoryStore, with the calls counted.
struct PlainStore {
  idem::MemoryStore memory;
  int claims = 0;
  int fails = 0;
  bool broken = false;  // claim() throws a StoreError

  idem::ClaimResult claim(const idem::Key& key, std::string_view fp, const idem::Options& o) {
    ++claims;
    if (broken) throw idem::StoreError("fake: the store is down", true);
    return memory.claim(key, fp, o);
  }
  void complete(const idem::Key& key, const idem::Ticket& ticket, std::string_view snapshot) {
    memory.complete(key, ticket, snapshot);
  }
  void fail(const idem::Key& key, const idem::Ticket& ticket, std::string_view error,
            bool retryable) {
    ++fails;
    memory.fail(key, ticket, error, retryable);
  }
  std::optional<idem::Record> find(const idem::Key& key) { return memory.find(key); }
  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    return memory.purge_expired(batch, max_batches);
  }
  std::size_t release_stale(std::size_t batch) { return memory.release_stale(batch); }
};

struct NoWaitStore : PlainStore {
  static constexpr bool supports_wait = false;
};

struct WaitingStore : PlainStore {
  static constexpr bool supports_wait = true;  // said explicitly: the same as not saying it
};

struct TransactionStore : PlainStore {
  static constexpr bool in_caller_transaction = true;
};

struct StandaloneStore : PlainStore {
  static constexpr bool in_caller_transaction = false;
};

struct AbandonStore : PlainStore {
  int abandons = 0;
  void abandon(const idem::Key& key, const idem::Ticket& ticket, std::string_view error) {
    ++abandons;
    memory.fail(key, ticket, error, true);
  }
};

struct RollbackStore : PlainStore {
  int rollbacks = 0;
  void set_rollback_only() noexcept { ++rollbacks; }
};

struct BatchStore : PlainStore {
  int batches = 0;
  std::vector<idem::ClaimResult> claim_batch(std::span<const idem::ClaimRequest> requests,
                                             const idem::Options& options) {
    ++batches;
    std::vector<idem::ClaimResult> results;
    for (const idem::ClaimRequest& r : requests)
      results.push_back(memory.claim(r.key, r.fingerprint, options));
    return results;
  }
};

// A claim_batch of another shape is not the optional operation (claim_batch falls back to claim()).
struct OddBatchStore : PlainStore {
  int claim_batch(std::span<const idem::ClaimRequest>, const idem::Options&) { return 0; }
};

// Abilities without the contract make no store.
struct NotAStore {
  static constexpr bool supports_wait = false;
  void abandon(const idem::Key&, const idem::Ticket&, std::string_view) {}
  void set_rollback_only() {}
};

struct Events : idem::Observer {
  std::vector<idem::EventKind> kinds;
  void on_event(const idem::Event& e) noexcept override { kinds.push_back(e.kind); }
};

}  // namespace

static_assert(idem::Store<idem::MemoryStore>);
static_assert(idem::supports_wait_v<idem::MemoryStore>);
static_assert(!idem::in_caller_transaction_v<idem::MemoryStore>);
static_assert(!idem::AbandoningStore<idem::MemoryStore>);
static_assert(!idem::RollbackOnlyStore<idem::MemoryStore>);
static_assert(!idem::AttemptCountingStore<idem::MemoryStore>);
static_assert(!idem::BatchClaimingStore<idem::MemoryStore>);

static_assert(idem::Store<PlainStore>);
static_assert(!idem::supports_wait_v<NoWaitStore> && idem::supports_wait_v<WaitingStore>);
static_assert(idem::in_caller_transaction_v<TransactionStore>);
static_assert(!idem::in_caller_transaction_v<StandaloneStore>);
static_assert(idem::AbandoningStore<AbandonStore> && !idem::AbandoningStore<RollbackStore>);
static_assert(idem::RollbackOnlyStore<RollbackStore> && !idem::RollbackOnlyStore<AbandonStore>);
static_assert(idem::BatchClaimingStore<BatchStore> && !idem::BatchClaimingStore<OddBatchStore>);
static_assert(!idem::Store<NotAStore> && !idem::AbandoningStore<NotAStore> &&
              !idem::RollbackOnlyStore<NotAStore>);
static_assert(!idem::supports_wait_v<NotAStore>);  // the flags are read from any type

TEMPLATE_TEST_CASE("optional operations: a store that forbids the wait answers in_progress at once",
                   "", NoWaitStore, WaitingStore) {
  TestType store;
  const idem::Key key{"PAY", "busy"};
  idem::IdempotencyGuard holder{store, key, ""};
  REQUIRE(holder.acquired());
  idem::IdempotencyGuard duplicate{store, key, "", {.wait = 30ms}};
  CHECK(duplicate.verdict() == idem::Verdict::in_progress);
  if (idem::supports_wait_v<TestType>) {
    CHECK(store.claims > 2);  // polled while it waited
  } else {
    CHECK(store.claims == 2);  // one claim each
  }
  holder.fail({{"error", "done"}}, true);
}

TEMPLATE_TEST_CASE(
    "optional operations: a store in the caller's transaction reports transaction_error", "",
    TransactionStore, StandaloneStore, PlainStore) {
  TestType store;
  store.broken = true;
  Events events;
  CHECK_THROWS_AS(
      (idem::IdempotencyGuard{store, idem::Key{"PAY", "down"}, "", {.observer = &events}}),
      idem::StoreError);
  const auto expected = idem::in_caller_transaction_v<TestType> ? idem::EventKind::transaction_error
                                                                : idem::EventKind::store_error;
  CHECK(events.kinds == std::vector<idem::EventKind>{expected});
}

TEMPLATE_TEST_CASE("optional operations: an abandoned guard calls abandon() on a store that has it",
                   "", AbandonStore, PlainStore) {
  TestType store;
  const idem::Key key{"PAY", "forgotten"};
  {
    idem::IdempotencyGuard guard{store, key, ""};
    REQUIRE(guard.acquired());
  }
  if constexpr (idem::AbandoningStore<TestType>) {
    CHECK(store.abandons == 1);
    CHECK(store.fails == 0);
  } else {
    CHECK(store.fails == 1);
  }
  const auto record = store.find(key);
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);  // either way the same retryable failure
  CHECK(record->retryable);
}

TEMPLATE_TEST_CASE("optional operations: claim_batch uses a store's own batch claim", "",
                   BatchStore, OddBatchStore, PlainStore) {
  TestType store;
  const std::vector<idem::ClaimRequest> requests{
      {idem::Key{"MQ", "1"}, ""}, {idem::Key{"MQ", "2"}, ""}, {idem::Key{"MQ", "1"}, ""}};
  const auto results = idem::claim_batch(store, requests);
  REQUIRE(results.size() == 3);
  CHECK(results[0].verdict == idem::Verdict::acquired);
  CHECK(results[1].verdict == idem::Verdict::acquired);
  CHECK(results[2].verdict == idem::Verdict::in_progress);
  if constexpr (idem::BatchClaimingStore<TestType>) {
    CHECK(store.batches == 1);
    CHECK(store.claims == 0);
  } else {
    CHECK(store.claims == 3);
  }
}

TEMPLATE_TEST_CASE(
    "optional operations: consume_batch rolls a batch back only on a rollback-only store", "",
    RollbackStore, PlainStore) {
  TestType store;
  const std::vector<idem::ClaimRequest> messages{
      {idem::Key{"MQ", "a"}, ""}, {idem::Key{"MQ", "b"}, ""}, {idem::Key{"MQ", "c"}, ""}};
  int runs = 0;
  const auto acks = idem::consume_batch(store, messages, [&](std::size_t i) {
    ++runs;
    if (i == 1) throw std::runtime_error("broker hiccup");
  });
  REQUIRE(acks.size() == 3);
  CHECK(acks[1] == idem::Ack::retry_later);
  if constexpr (idem::RollbackOnlyStore<TestType>) {
    CHECK(store.rollbacks == 1);
    CHECK(runs == 2);  // no message runs after the one that failed
    CHECK(acks[0] == idem::Ack::retry_later);
    CHECK(acks[2] == idem::Ack::retry_later);
  } else {
    CHECK(runs == 3);
    CHECK(acks[0] == idem::Ack::commit);
    CHECK(acks[2] == idem::Ack::commit);
  }
}
