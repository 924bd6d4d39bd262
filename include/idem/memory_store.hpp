#pragma once
// idem::MemoryStore: an in-process Store for unit tests of handlers and for single-process
// services that can afford to forget on restart. It makes the same decisions as the SQL
// backends, case for case (it applies idem/backend/record_rules.hpp directly), and its clock is
// injectable so that
// a test can move time past a lease or a ttl without sleeping.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
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
#include "idem/detail/recovery_points.hpp"
#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/repair.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem {

struct MemoryStoreParams {
  // Where `now` comes from. Inject a ManualClock to move time in tests.
  std::function<TimePoint()> clock = system_now;
  // Independent lock shards; more shards, less contention between threads on different keys.
  std::size_t shards = 64;
};

class MemoryStore {
 public:
  MemoryStore() : MemoryStore(MemoryStoreParams{}) {}
  explicit MemoryStore(std::function<TimePoint()> clock)
      : MemoryStore(MemoryStoreParams{.clock = std::move(clock)}) {}
  explicit MemoryStore(MemoryStoreParams params)
      : clock_(std::move(params.clock)), shards_(std::max<std::size_t>(params.shards, 1)) {
    if (!clock_) throw InvalidArgument("idem::MemoryStore: clock must not be empty");
  }

  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  ClaimResult claim(const Key& key, std::string_view fingerprint, const Options& options) {
    validate(options);
    detail::check_fingerprint(fingerprint);
    const TimePoint now = clock_();
    Shard& shard = shard_for(key);
    std::lock_guard lock(shard.mutex);
    auto it = shard.records.find(key);
    if (it == shard.records.end()) {
      it = shard.records
               .emplace(key, backend::claim_record(key, detail::new_owner_token(), fingerprint, now,
                                                   options))
               .first;
      return {Verdict::acquired, it->second};
    }
    Record& stored = it->second;
    const backend::Decision d = backend::decide(stored, fingerprint, now);
    if (backend::is_takeover(d)) {
      stored = backend::take_over(stored, d, fingerprint, detail::new_owner_token(), now, options);
    }
    return {backend::verdict_of(d), stored, backend::resumes_crashed(d)};
  }

  void complete(const Key& key, const Ticket& ticket, std::string_view snapshot) {
    finish(key, ticket, snapshot, Status::succeeded, false);
  }

  void fail(const Key& key, const Ticket& ticket, std::string_view error, bool retryable) {
    finish(key, ticket, error, Status::failed, retryable);
  }

  std::optional<Record> find(const Key& key) const {
    const Shard& shard = shard_for(key);
    std::lock_guard lock(shard.mutex);
    auto it = shard.records.find(key);
    if (it == shard.records.end()) return std::nullopt;
    return it->second;
  }

  std::size_t purge_expired(std::size_t batch, std::size_t max_batches) {
    const TimePoint now = clock_();
    const bool huge =
        max_batches != 0 && batch > std::numeric_limits<std::size_t>::max() / max_batches;
    std::size_t budget = huge ? std::numeric_limits<std::size_t>::max() : batch * max_batches;
    std::size_t removed = 0;
    // One shard lock at a time, at most `batch` deletions per hold.
    for (Shard& shard : shards_) {
      while (budget > 0) {
        std::lock_guard lock(shard.mutex);
        std::size_t round = 0;
        for (auto it = shard.records.begin();
             it != shard.records.end() && round < batch && budget > 0;) {
          if (backend::is_expired(it->second, now)) {
            it = shard.records.erase(it);
            ++round, ++removed, --budget;
          } else {
            ++it;
          }
        }
        if (round < batch) break;  // this shard has no more expired records
      }
    }
    return removed;
  }

  std::size_t release_stale(std::size_t batch) {
    const TimePoint now = clock_();
    std::size_t count = 0;
    for (Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      for (auto& [key, r] : shard.records) {
        if (count == batch) return count;
        if (backend::is_stale(r, now)) {
          r = backend::released(r, now);
          ++count;
        }
      }
    }
    return count;
  }

  Record repair(const Key& key, const Repair& repair) {
    validate(repair);
    const TimePoint now = clock_();
    Shard& shard = shard_for(key);
    std::lock_guard lock(shard.mutex);
    auto it = shard.records.find(key);
    if (it == shard.records.end()) {
      throw backend::repair_refused("idem::MemoryStore", key, repair.fence, std::nullopt);
    }
    if (!backend::repair_holds(it->second, repair.fence)) {
      throw backend::repair_refused("idem::MemoryStore", key, repair.fence, it->second);
    }
    it->second = backend::repaired(it->second, repair, detail::new_owner_token(), now);
    return it->second;
  }

  std::vector<Record> list(const RecordQuery& query) const {
    validate(query);
    const TimePoint now = clock_();
    std::vector<Record> found;
    for (const Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      for (const auto& [key, r] : shard.records)
        if (backend::matches(query, r, now)) found.push_back(r);
    }
    const auto before = [&](const Record& a, const Record& b) {
      return backend::listed_before(query, a, b);
    };
    const std::size_t n = std::min(query.limit, found.size());
    std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(n), found.end(),
                      before);
    found.erase(found.begin() + static_cast<std::ptrdiff_t>(n), found.end());
    return found;
  }

  RecordStats stats() const {
    RecordStats stats{.now = clock_()};
    for (const Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      for (const auto& [key, r] : shard.records)
        backend::tally(stats, r);
    }
    return stats;
  }

  std::string record_step(const Key& key, const Ticket& ticket, std::string_view step,
                          std::string_view result) {
    const TimePoint now = clock_();
    Shard& shard = shard_for(key);
    std::lock_guard lock(shard.mutex);
    auto it = shard.records.find(key);
    if (it == shard.records.end() || !backend::holds(it->second, ticket)) {
      detail::checked_step(step, result);  // a bad step is InvalidArgument before LeaseLost
      throw backend::lease_lost("idem::MemoryStore", key, ticket);
    }
    std::string points = detail::with_step(it->second.recovery_points, step, result);
    if (points != it->second.recovery_points) {
      it->second.recovery_points = points;
      it->second.updated_at = now;
    }
    return points;
  }

  // Number of records held, expired ones included (for tests and metrics).
  std::size_t size() const {
    std::size_t n = 0;
    for (const Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      n += shard.records.size();
    }
    return n;
  }

  TimePoint now() const { return clock_(); }

 private:
  struct Shard {
    mutable std::mutex mutex;
    std::unordered_map<Key, Record> records;
  };

  Shard& shard_for(const Key& key) { return shards_[std::hash<Key>{}(key) % shards_.size()]; }
  const Shard& shard_for(const Key& key) const {
    return shards_[std::hash<Key>{}(key) % shards_.size()];
  }

  void finish(const Key& key, const Ticket& ticket, std::string_view snapshot, Status to,
              bool retryable) {
    detail::check_snapshot(snapshot);
    const TimePoint now = clock_();
    Shard& shard = shard_for(key);
    std::lock_guard lock(shard.mutex);
    auto it = shard.records.find(key);
    if (it == shard.records.end() || !backend::holds(it->second, ticket)) {
      throw backend::lease_lost("idem::MemoryStore", key, ticket);
    }
    it->second = backend::finished(it->second, to, snapshot, retryable, now);
  }

  std::function<TimePoint()> clock_;
  std::vector<Shard> shards_;
};

static_assert(Store<MemoryStore>);
static_assert(RepairingStore<MemoryStore> && ListingStore<MemoryStore> &&
              RecoveryPointStore<MemoryStore>);

}  // namespace idem
