#pragma once
// The WHERE conditions with which an SQL store re-checks, on the server and in the same
// statement as its write, a rule of idem/backend/record_rules.hpp: each is named after the rule
// it re-checks, so a decision taken on a read can never be written over a row that moved on
// meanwhile. `now` is the dialect's expression of the store's time (MySQL's
// UTC_TIMESTAMP(3), a bound parameter on SQLite), `fence` and `owner` its placeholders for
// the ticket. The columns are those of the record table (docs/schema.sql).

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/backend/record_rules.hpp"
#include "idem/status.hpp"

namespace idem::backend::sql_guard {

constexpr int code(Status s) noexcept {
  return static_cast<int>(s);
}

// record_rules: is_expired (an outcome_unknown record never expires).
inline std::string is_expired(std::string_view now) {
  return fmt::format("expire_at <= {} AND status <> {}", now, code(Status::outcome_unknown));
}

// record_rules: is_stale.
inline std::string is_stale(std::string_view now) {
  return fmt::format("status = {} AND lease_until <= {} AND expire_at > {}",
                     code(Status::processing), now, now);
}

// record_rules: is_retry_due.
inline std::string is_retry_due(std::string_view now) {
  return fmt::format(
      "expire_at > {0} AND ((status = {1} AND lease_until <= {0}) OR (status = {2} AND "
      "retryable = 1))",
      now, code(Status::processing), code(Status::failed));
}

// record_rules: takeover_holds, together with "the ticket read is still the stored one" (so a
// purge and re-insert in between cannot be mistaken for the row that was read).
inline std::string takeover_holds(Decision d, std::string_view now, std::string_view fence,
                                  std::string_view owner) {
  return fmt::format("fence = {} AND owner_token = {} AND {}", fence, owner,
                     d == Decision::take_over_expired ? is_expired(now) : is_retry_due(now));
}

// record_rules: repair_holds, with the owner read too (a repair writes over the row it read).
inline std::string repair_holds(std::string_view fence, std::string_view owner) {
  return fmt::format("fence = {} AND owner_token = {}", fence, owner);
}

// record_rules: holds.
inline std::string holds(std::string_view fence, std::string_view owner) {
  return fmt::format("status = {} AND fence = {} AND owner_token = {}", code(Status::processing),
                     fence, owner);
}

}  // namespace idem::backend::sql_guard
