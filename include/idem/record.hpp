#pragma once
// idem::Record: one row of the idempotency table, as every store reports it.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "idem/clock.hpp"
#include "idem/key.hpp"
#include "idem/status.hpp"
#include "idem/ticket.hpp"

namespace idem {

// The largest response or error snapshot a store accepts (JSON text, bytes). Larger
// snapshots are refused with idem::InvalidArgument before anything is written.
inline constexpr std::size_t max_snapshot_bytes = 1 << 20;
// The largest repair reason kept with a record (printable UTF-8, bytes).
inline constexpr std::size_t max_repair_reason_bytes = 512;
// The largest request fingerprint (printable ASCII; SHA-256 hex from idem::fingerprint is 64).
inline constexpr std::size_t max_fingerprint_bytes = 128;

struct Record {
  Key key;
  Status status = Status::processing;
  Ticket ticket;               // fence + owner token of the latest claim or takeover
  std::string fingerprint;     // request fingerprint; empty when the claimer opted out
  std::string snapshot;        // JSON text: the response (succeeded) or the error (failed)
  bool retryable = false;      // for failed records: may the next duplicate run again?
  std::uint32_t attempts = 0;  // claims that ran the business (1 for the first)
  TimePoint created_at{};
  TimePoint updated_at{};
  TimePoint lease_until{};  // a processing claim is honoured until then
  TimePoint expire_at{};    // after this the record no longer counts and may be purged
  // JSON object text, step name -> the step's result: the finished steps of the business
  // (recovery points, idem/attempt.hpp). Empty when no step finished.
  std::string recovery_points{};
  // Why and when the record was last repaired (idem/repair.hpp); empty / nullopt if never.
  std::string repair_reason{};
  std::optional<TimePoint> repaired_at{};

  friend bool operator==(const Record&, const Record&) = default;
};

}  // namespace idem
