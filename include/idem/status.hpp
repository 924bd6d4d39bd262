#pragma once
// The lifecycle of an idempotency record. The numeric values are what the SQL tables store.

#include <cstdint>
#include <string_view>

namespace idem {

enum class Status : std::uint8_t {
  processing = 0,  // claimed; the business is running (or its worker died: see the lease)
  succeeded = 1,   // finished; duplicates replay the stored response
  failed = 2,      // finished with an error; retryable ones may be claimed again
  // A worker died during an effect outside the store and nobody can yet tell whether the effect
  // happened: the business never runs again by itself and no answer is replayed. Only a
  // resolver pass or a repair (idem/repair.hpp) moves the record on; it never expires.
  outcome_unknown = 3,
};

constexpr std::string_view to_string(Status s) noexcept {
  switch (s) {
    case Status::processing:
      return "processing";
    case Status::succeeded:
      return "succeeded";
    case Status::failed:
      return "failed";
    case Status::outcome_unknown:
      return "outcome_unknown";
  }
  return "unknown";
}

}  // namespace idem
