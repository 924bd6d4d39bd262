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

}  // namespace idem
