#pragma once
// The record table's columns as every SQL store reads and writes them: the order of a read's
// row, the columns a claim's INSERT fills, and the order of a takeover's values. One list, so
// that the dialects' statements and their decoders can never disagree about a position.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "idem/backend/record_rules.hpp"
#include "idem/record.hpp"
#include "idem/ticket.hpp"

namespace idem::backend {

// The position of each column in a read's row (docs/schema.sql). A read that also asks for the
// server's time answers it last, at `now`.
namespace column {
enum : int {
  key,
  biz_type,
  status,
  fence,
  owner_token,
  request_hash,
  response_snapshot,
  retryable,
  attempts,
  lease_until,
  created_at,
  updated_at,
  expire_at,
  recovery_points,
  repair_reason,
  repaired_at,
  count,
  now = count,
  count_with_now,
  // A claim's INSERT fills the columns before this one; the later ones start NULL (no steps,
  // no repair).
  claimed = recovery_points,
};
}  // namespace column

inline constexpr std::array<std::string_view, column::count> column_names{
    "idempotent_key", "biz_type",          "status",    "fence",           "owner_token",
    "request_hash",   "response_snapshot", "retryable", "attempts",        "lease_until",
    "created_at",     "updated_at",        "expire_at", "recovery_points", "repair_reason",
    "repaired_at"};

constexpr bool is_time_column(int c) noexcept {
  return c == column::lease_until || c == column::created_at || c == column::updated_at ||
         c == column::expire_at || c == column::repaired_at;
}

// The first `n` columns, comma-separated, each as `spell(name, is_time)` writes it: a dialect
// whose times are not the driver's type reads them through an expression.
template <class Spell>
std::string column_list(int n, Spell spell) {
  std::string out;
  for (int c = 0; c < n; ++c) {
    if (c != 0) out += ", ";
    out += spell(column_names[static_cast<std::size_t>(c)], is_time_column(c));
  }
  return out;
}
inline std::string column_list(int n = column::count) {
  return column_list(n, [](std::string_view name, bool) { return std::string(name); });
}

// The recovery points as a value to bind: each dialect binds them as bytes.
struct PointsValue {
  std::string_view bytes;
};

// The values of a takeover's UPDATE, in the order of its placeholders in every dialect: the
// record take_over() computed (status, fence, owner, fingerprint, attempts, then lease_until,
// created_at, updated_at and expire_at as TimePoint), its key, the ticket read, and for
// anything but an expired record's fresh start the points read, which take_over() kept and
// which guard the write. `add` is called once per value, in that order.
template <class Add>
void takeover_values(Decision d, const Record& next, const Ticket& read, Add&& add) {
  add(static_cast<int>(next.status));
  add(next.ticket.fence);
  add(next.ticket.owner);
  add(next.fingerprint);
  add(next.attempts);
  add(next.lease_until);
  add(next.created_at);
  add(next.updated_at);
  add(next.expire_at);
  add(next.key.id());
  add(next.key.biz_type());
  add(read.fence);
  add(read.owner);
  if (d != Decision::take_over_expired) add(PointsValue{next.recovery_points});
}

}  // namespace idem::backend
