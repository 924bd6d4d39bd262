#pragma once
// The lifecycle of an idempotency record. The numeric values are what the SQL tables store.

#include <cstdint>
#include <string_view>

namespace idem {

enum class Status : std::uint8_t {
  processing = 0,  // claimed; the business is running (or its worker died: see the lease)
  succeeded = 1,   // finished; duplicates replay the stored response
  failed = 2,      // finished with an error; retryable ones may be claimed again
};

constexpr std::string_view to_string(Status s) noexcept {
  switch (s) {
    case Status::processing:
      return "processing";
    case Status::succeeded:
      return "succeeded";
    case Status::failed:
      return "failed";
  }
  return "unknown";
}

}  // namespace idem
