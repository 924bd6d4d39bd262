#pragma once
// idem::TransitionResult: what one StateMachine transition came to (transitioned, or rejected
// and why), and the TransitionOptions that ask for the why.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "idem/transition.hpp"

namespace idem {

enum class TransitionOutcome { transitioned, rejected };

enum class RejectReason {
  none,              // not rejected
  not_explained,     // rejected; the caller did not ask why (TransitionOptions::explain)
  not_found,         // no row has this key
  status_moved_on,   // the row's status is no longer `from` (already paid, refunded, ...)
  version_moved_on,  // the status is still `from`, but the version is not the caller's
  indeterminate,     // the read after the UPDATE found the row matching: it changed in
                     // between (only possible when the two do not share a transaction)
};

constexpr std::string_view to_string(TransitionOutcome o) noexcept {
  return o == TransitionOutcome::transitioned ? "transitioned" : "rejected";
}

constexpr std::string_view to_string(RejectReason r) noexcept {
  switch (r) {
    case RejectReason::none:
      return "none";
    case RejectReason::not_explained:
      return "not_explained";
    case RejectReason::not_found:
      return "not_found";
    case RejectReason::status_moved_on:
      return "status_moved_on";
    case RejectReason::version_moved_on:
      return "version_moved_on";
    case RejectReason::indeterminate:
      return "indeterminate";
  }
  return "unknown";
}

struct TransitionOptions {
  // On a rejection, read the row once (one SELECT, on the rejection path only) to say why.
  bool explain = false;
};

// The outcome of one transition: transitioned, or rejected with (when asked) the reason and
// what the row holds now.
template <StatusEnum E>
struct TransitionResult {
  TransitionOutcome outcome = TransitionOutcome::rejected;
  RejectReason reason = RejectReason::not_explained;
  // Filled by an explained rejection that found the row:
  std::optional<std::string> stored_status{};  // the status column as text; nullopt for NULL
  std::optional<E> status{};              // stored_status, if it is one of the machine's states
  std::optional<std::int64_t> version{};  // the version column (versioned machines)

  bool transitioned() const noexcept { return outcome == TransitionOutcome::transitioned; }
  bool rejected() const noexcept { return outcome == TransitionOutcome::rejected; }
  explicit operator bool() const noexcept { return transitioned(); }
  // Rejected because someone else moved the row first (a duplicate, a race, a stale read).
  bool stale() const noexcept {
    return reason == RejectReason::status_moved_on || reason == RejectReason::version_moved_on;
  }

  static TransitionResult success() {
    return TransitionResult{.outcome = TransitionOutcome::transitioned,
                            .reason = RejectReason::none};
  }
  static TransitionResult rejection() { return TransitionResult{}; }
};

// What the explaining read found, in text form (as a database returns it).
struct ProbeRow {
  std::optional<std::string> status{};
  std::optional<std::string> version{};  // absent for machines without a version column
};

}  // namespace idem
