#pragma once
// idem::Repair: a fenced change of one record by someone other than its claimer: the resolver
// (idem/resolver.hpp) after a crashed attempt, the Janitor's resolver pass, an operator's tool.
//
//   const auto seen = store.find(key);                  // the operator looks first
//   store.repair(key, {.action = idem::RepairAction::complete,
//                      .fence = seen->ticket.fence,     // applied only while it is still this
//                      .snapshot = R"({"charge":"ch_1"})",
//                      .reason = "gateway shows charge ch_1 for this trade"});
//
// A repair applies only while the record still carries the fence the caller read; otherwise
// the store throws RepairRefused with the record as it is now, and changes nothing. It bumps
// the fence (so the crashed worker's late complete() or fail() gets LeaseLost), keeps the
// reason and the time with the record, and never shortens its life: expire_at becomes at least
// now + keep. Stores that can repair have `Record repair(const Key&, const Repair&)`
// (idem::RepairingStore, idem/optional_operations.hpp), returning the record as written.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/clock.hpp"
#include "idem/detail/checks.hpp"
#include "idem/detail/utf8.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"

namespace idem {

enum class RepairAction {
  complete,      // succeeded with `snapshot` as the response: duplicates replay it
  fail,          // failed with `snapshot` as the error; `retryable` lets the next duplicate run
  release,       // failed retryably: the next duplicate runs the business again (it is safe)
  mark_unknown,  // outcome_unknown: nothing runs or replays until a later repair
};

constexpr std::string_view to_string(RepairAction a) noexcept {
  switch (a) {
    case RepairAction::complete:
      return "complete";
    case RepairAction::fail:
      return "fail";
    case RepairAction::release:
      return "release";
    case RepairAction::mark_unknown:
      return "mark_unknown";
  }
  return "unknown";
}

struct Repair {
  RepairAction action = RepairAction::release;
  // The fence the caller read (Record::ticket.fence): the repair applies only while the record
  // still carries it.
  std::uint64_t fence = 0;
  // JSON text. complete: the response (required). fail, mark_unknown: the error or what is
  // known (empty: a note naming the repair). release: ignored.
  std::string snapshot{};
  bool retryable = false;  // fail only
  // Why, in words an operator reads later (printable UTF-8, 1 to max_repair_reason_bytes).
  std::string reason{};
  // The repaired record counts at least this long from now (its expire_at is never shortened).
  Duration keep = std::chrono::hours{24 * 7};
};

// Thrown by a store's repair() when the record no longer carries the fence the caller read, or
// is gone. Nothing was written.
class RepairRefused : public Error {
 public:
  RepairRefused(const std::string& what, std::optional<Record> current)
      : Error(what), current_(std::move(current)) {}
  // The record as it is now; nullopt when there is none.
  const std::optional<Record>& current() const noexcept { return current_; }

 private:
  std::optional<Record> current_;
};

// Throws idem::InvalidArgument when a field breaks its rule (nothing is written then).
inline void validate(const Repair& r) {
  if (r.fence == 0) throw InvalidArgument("idem::Repair: fence must be the fence read (>= 1)");
  if (r.reason.empty() || r.reason.size() > max_repair_reason_bytes) {
    throw InvalidArgument(fmt::format("idem::Repair: reason must be 1 to {} bytes, got {}",
                                      max_repair_reason_bytes, r.reason.size()));
  }
  if (const auto check = detail::check_text(r.reason); check.fault != detail::TextFault::none) {
    throw InvalidArgument(
        fmt::format("idem::Repair: reason must be printable UTF-8; byte {} is not", check.offset));
  }
  if (r.keep <= Duration::zero() || r.keep > max_ttl) {
    throw InvalidArgument(
        fmt::format("idem::Repair: keep must be positive and at most {} ms", max_ttl.count()));
  }
  const bool needs_snapshot = r.action == RepairAction::complete;
  const bool takes_snapshot = r.action != RepairAction::release;
  if (needs_snapshot && r.snapshot.empty()) {
    throw InvalidArgument("idem::Repair: complete needs the response as its snapshot");
  }
  if (takes_snapshot && !r.snapshot.empty()) {
    detail::check_snapshot(r.snapshot);
    if (!nlohmann::json::accept(r.snapshot)) {
      throw InvalidArgument(
          fmt::format("idem::Repair: the snapshot of {} is not JSON text", to_string(r.action)));
    }
  }
}

}  // namespace idem
