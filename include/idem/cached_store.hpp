#pragma once
// idem::CachedStore<S>: answers the duplicates of recently finished keys from process memory,
// without a round trip to the store.
//
//   idem::mysql::Store db{pool};
//   idem::CachedStore cached{db, {.max_entries = 100'000}};
//   auto out = idem::run_once(cached, key, fp, charge, options);  // a cached duplicate: no SQL
//
// What it keeps: records that succeeded or failed permanently, as this process's complete() or
// fail() recorded them or as a claim read them from the store. Such a record is final until it
// expires, so a copy answers a claim exactly as the store would (the decision table of
// idem/backend/record_rules.hpp): replayed for the same fingerprint, conflict for another. It
// never keeps a processing record or a retryable failure (they change without this process
// knowing), and an entry stops counting once its record's expire_at is near (judged by
// CacheParams::clock) or it is older than max_age; the store decides then.
//
// Do not use it:
//  - when records are deleted or changed behind idem's back (by hand, by a migration, by a
//    purge with a clock far ahead): the cache keeps answering from its copy for up to max_age;
//    so does a repair of a finished record made in another process (repair() through this
//    cache forgets the key; the resolver's repairs only touch processing and outcome_unknown
//    records, which a cache never holds);
//  - when this process's clock may be further from the store's than clock_margin (the MySQL
//    store judges expiry by the database server's clock);
//  - over a store bound to a transaction (same-transaction mode): a result recorded there may
//    still roll back. A static_assert refuses such stores.
//
// Thread-safe: one mutex around an LRU list, bounded in entries and bytes.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "idem/backend/record_rules.hpp"
#include "idem/clock.hpp"
#include "idem/detail/checks.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"

namespace idem {

struct CacheParams {
  // Entries kept at most (finished records), and the bytes of their keys, fingerprints and
  // snapshots at most; the least recently used go first.
  std::size_t max_entries = 10'000;
  std::size_t max_bytes = std::size_t{64} << 20;
  // How long one copy is trusted at most, whatever its expire_at: bounds how long a record
  // changed behind idem's back is still answered from memory.
  Duration max_age = std::chrono::minutes{5};
  // A copy stops counting this long before its record's expire_at, so that a store whose clock
  // runs ahead of this process's by less than this never sees a cached answer it would not
  // give.
  Duration clock_margin = std::chrono::seconds{1};
  // This process's wall clock (inject a ManualClock's in tests).
  std::function<TimePoint()> clock = system_now;
};

struct CacheStats {
  std::uint64_t hits = 0;       // claims answered from memory
  std::uint64_t misses = 0;     // claims that went to the store
  std::uint64_t evictions = 0;  // entries dropped for room (not for age or expiry)
  std::size_t entries = 0;
  std::size_t bytes = 0;
};

template <Store S>
class CachedStore {
  static_assert(!in_caller_transaction_v<S>,
                "idem::CachedStore: a store bound to a transaction records results that may "
                "still roll back; cache the standalone store instead");

 public:
  static constexpr bool supports_wait = supports_wait_v<S>;

  explicit CachedStore(S& store, CacheParams params = {})
      : store_(store), params_(std::move(params)) {
    if (!params_.clock) throw InvalidArgument("idem::CachedStore: clock must not be empty");
    if (params_.max_age <= Duration::zero() || params_.clock_margin < Duration::zero()) {
      throw InvalidArgument(
          "idem::CachedStore: max_age must be positive and clock_margin not negative");
    }
  }
  CachedStore(const CachedStore&) = delete;
  CachedStore& operator=(const CachedStore&) = delete;

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    validate(options);  // a cached answer refuses bad input as the store would
    detail::check_fingerprint(fingerprint);
    if (std::optional<Record> copy = cached(key)) {
      // A final record that has not expired decides replay or conflict, never a takeover.
      const backend::Decision d = backend::decide(*copy, fingerprint, params_.clock());
      if (options.observer != nullptr) {
        options.observer->on_event(Event{EventKind::cache_hit,
                                         key.biz_type(),
                                         key.id(),
                                         std::chrono::nanoseconds{0},
                                         nullptr,
                                         copy->ticket.fence,
                                         copy->attempts,
                                         {},
                                         options.context});
      }
      return {backend::verdict_of(d), std::move(*copy)};
    }
    ClaimResult r = store_.claim(key, fingerprint, options);
    if (r.verdict == Verdict::acquired) {
      remember_claim(r.record);
    } else if (is_final(r.record)) {
      keep(r.record);
    }
    return r;
  }

  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    store_.complete(key, ticket, snapshot);
    finished_claim(key, ticket, Status::succeeded, snapshot, false);
  }

  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    store_.fail(key, ticket, error, retryable);
    finished_claim(key, ticket, Status::failed, error, retryable);
  }

  // The store's record, not the cache's: find() is what operators and tests trust.
  std::optional<Record> find(const Key& key) { return store_.find(key); }
  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    return store_.purge_expired(batch, max_batches);
  }
  std::size_t release_stale(std::size_t batch) { return store_.release_stale(batch); }

  // A repair changes a record the cache may hold: the store repairs, and this cache forgets
  // the key. (Other processes' caches keep their copy until max_age; see the header comment.)
  Record repair(const Key& key, const Repair& repair) requires RepairingStore<S> {
    forget(key);
    Record r = store_.repair(key, repair);
    forget(key);  // a claim answered from the store in between may have cached the old record
    return r;
  }
  std::vector<Record> list(const RecordQuery& query) requires ListingStore<S> {
    return store_.list(query);
  }
  std::string record_step(
      const Key& key, const Ticket& ticket, std::string_view step, std::string_view result,
      std::optional<std::string_view> known = std::nullopt) requires RecoveryPointStore<S> {
    if constexpr (requires { store_.record_step(key, ticket, step, result, known); }) {
      return store_.record_step(key, ticket, step, result, known);
    } else {
      return store_.record_step(key, ticket, step, result);
    }
  }

  // Drops the copy of one key (after changing its record by hand), or of every key.
  void forget(const Key& key) {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) drop(it->second);
  }
  void clear() {
    std::lock_guard lock(mutex_);
    lru_.clear();
    index_.clear();
    claims_.clear();
    claim_index_.clear();
    bytes_ = 0;
  }

  CacheStats stats() const {
    std::lock_guard lock(mutex_);
    return {hits_, misses_, evictions_, lru_.size(), bytes_};
  }

  S& store() noexcept { return store_; }

 private:
  struct Entry {
    Record record;
    std::size_t bytes;
    std::chrono::steady_clock::time_point kept_at;
  };
  using Lru = std::list<Entry>;  // most recently used first

  static bool is_final(const Record& r) noexcept {
    return r.status == Status::succeeded || (r.status == Status::failed && !r.retryable);
  }
  static std::size_t size_of(const Record& r) noexcept {
    return sizeof(Entry) + r.key.id().size() + r.key.biz_type().size() + r.fingerprint.size() +
           r.snapshot.size() + r.ticket.owner.size();
  }

  // The copy of a final record that still counts (a hit), or nullopt (a miss), counted as such.
  std::optional<Record> cached(const Key& key) {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      const Entry& e = *it->second;
      const bool stale = std::chrono::steady_clock::now() - e.kept_at >= params_.max_age ||
                         backend::is_expired(e.record, params_.clock() + params_.clock_margin);
      if (!stale) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++hits_;
        return e.record;
      }
      drop(it->second);
    }
    ++misses_;
    return std::nullopt;
  }

  void keep(const Record& r) {
    const std::size_t bytes = size_of(r);
    if (bytes > params_.max_bytes || params_.max_entries == 0) return;
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(r.key); it != index_.end()) drop(it->second);
    lru_.push_front(Entry{r, bytes, std::chrono::steady_clock::now()});
    index_.emplace(r.key, lru_.begin());
    bytes_ += bytes;
    while (lru_.size() > params_.max_entries || bytes_ > params_.max_bytes) {
      drop(std::prev(lru_.end()));
      ++evictions_;
    }
  }

  void drop(typename Lru::iterator it) {
    bytes_ -= it->bytes;
    index_.erase(it->record.key);
    lru_.erase(it);
  }

  void remember_claim(const Record& r) {
    if (params_.max_entries == 0) return;
    std::lock_guard lock(mutex_);
    claims_.push_front(r);
    claim_index_[r.ticket.owner] = claims_.begin();
    if (claims_.size() > params_.max_entries) {
      claim_index_.erase(claims_.back().ticket.owner);
      claims_.pop_back();
    }
  }

  void finished_claim(const Key& key, const Ticket& ticket, Status to, std::string_view snapshot,
                      bool retryable) {
    std::optional<Record> held;
    {
      std::lock_guard lock(mutex_);
      auto it = claim_index_.find(ticket.owner);
      if (it == claim_index_.end()) return;
      if (it->second->key == key && it->second->ticket == ticket) held = std::move(*it->second);
      claims_.erase(it->second);
      claim_index_.erase(it);
    }
    if (!held || (to == Status::failed && retryable)) return;
    // updated_at: this process's clock; the store stamped the row with its own.
    keep(backend::finished(*held, to, snapshot, retryable, params_.clock()));
  }

  S& store_;
  CacheParams params_;
  mutable std::mutex mutex_;
  Lru lru_;
  std::unordered_map<Key, typename Lru::iterator> index_;
  // Claims acquired through this cache and not finished yet, so that complete() and fail()
  // can keep the finished record without reading it back. As many as entries at most; the
  // oldest is forgotten first (its finished record is then simply not kept).
  std::list<Record> claims_;
  std::unordered_map<std::string, std::list<Record>::iterator> claim_index_;
  std::size_t bytes_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
  std::uint64_t evictions_ = 0;
};

}  // namespace idem
