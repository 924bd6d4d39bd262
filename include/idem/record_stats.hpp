#pragma once
// idem::RecordStats: what a store's stats() answers (idem::StatsStore,
// idem/optional_operations.hpp), for an operator's `idem stats` and `idem purge --dry-run`: how
// many records each business type has in each status, how many expired records the purge would
// delete now (the purge's own rule, is_expired), and the stale claims (is_stale) with the oldest
// one's lease. Times are judged by the store's clock, like claims. Counting reads the whole table
// (an index of it where the store has one): an operator's command, not something to run per
// request.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "idem/backend/record_rules.hpp"
#include "idem/clock.hpp"
#include "idem/record.hpp"
#include "idem/status.hpp"

namespace idem {

// The records of one business type in one status.
struct RecordCount {
  std::string biz_type{};
  Status status = Status::processing;
  std::uint64_t records = 0;

  friend bool operator==(const RecordCount&, const RecordCount&) = default;
};

struct RecordStats {
  // By business type, then status; a pair without records is left out.
  std::vector<RecordCount> counts{};
  // Expired records that purge_expired() would delete now.
  std::uint64_t purge_backlog = 0;
  // Processing records whose lease ran out (their workers are presumed dead).
  std::uint64_t stale_claims = 0;
  // The lease end of the oldest stale claim, if there is one.
  std::optional<TimePoint> oldest_stale_lease{};
  // The store's clock when it counted.
  TimePoint now{};
  // What the table and its indexes take, as the database reports it (an estimate on InnoDB);
  // none where the store cannot tell.
  std::optional<std::uint64_t> table_bytes{};

  std::uint64_t total() const noexcept {
    std::uint64_t n = 0;
    for (const RecordCount& c : counts)
      n += c.records;
    return n;
  }
};

// Adds `r` to `stats` as judged at stats.now (a store that counts in memory applies this; an
// SQL store says the same in its queries). Keeps `counts` ordered by biz_type, then status.
inline void tally(RecordStats& stats, const Record& r) {
  auto at = stats.counts.begin();
  while (at != stats.counts.end() && (at->biz_type < r.key.biz_type() ||
                                      (at->biz_type == r.key.biz_type() && at->status < r.status)))
    ++at;
  if (at != stats.counts.end() && at->biz_type == r.key.biz_type() && at->status == r.status) {
    ++at->records;
  } else {
    stats.counts.insert(
        at, RecordCount{.biz_type = r.key.biz_type(), .status = r.status, .records = 1});
  }
  if (backend::is_expired(r, stats.now)) ++stats.purge_backlog;
  if (backend::is_stale(r, stats.now)) {
    ++stats.stale_claims;
    if (!stats.oldest_stale_lease || r.lease_until < *stats.oldest_stale_lease)
      stats.oldest_stale_lease = r.lease_until;
  }
}

}  // namespace idem
