#pragma once
// idem::RecordQuery: which records a store's list() answers (idem::ListingStore,
// idem/optional_operations.hpp): the Janitor's resolver pass asks for stale claims and for
// outcome_unknown records of the business types it has resolvers for; an operator asks for
// whatever needs a look. Times are judged by the store's clock, like claims.

#include <cstddef>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/record.hpp"
#include "idem/status.hpp"

namespace idem {

// The most records one list() answers.
inline constexpr std::size_t max_list_limit = 10'000;

struct RecordQuery {
  // Only processing records whose lease ran out (is_stale: their workers are presumed dead),
  // oldest lease first. Excludes `status`.
  bool stale = false;
  // Only records in this status, least recently updated first.
  std::optional<Status> status{};
  // Only this business type; empty: every type.
  std::string biz_type{};
  // Only records not updated for at least this long.
  std::optional<Duration> not_updated_for{};
  // At most this many records (1 to max_list_limit).
  std::size_t limit = 100;
};

// Throws idem::InvalidArgument when a field breaks its rule.
inline void validate(const RecordQuery& q) {
  if (q.stale && q.status) {
    throw InvalidArgument("idem::RecordQuery: stale and status exclude each other");
  }
  if (q.limit == 0 || q.limit > max_list_limit) {
    throw InvalidArgument(
        fmt::format("idem::RecordQuery: limit must be 1 to {}, got {}", max_list_limit, q.limit));
  }
  if (q.not_updated_for && *q.not_updated_for < Duration::zero()) {
    throw InvalidArgument("idem::RecordQuery: not_updated_for must not be negative");
  }
  if (!q.biz_type.empty()) detail::validate_biz_type(q.biz_type);
}

}  // namespace idem
