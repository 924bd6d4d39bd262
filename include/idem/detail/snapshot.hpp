#pragma once
// Encoding and decoding of response / error snapshots (JSON text in the store).

#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/detail/checks.hpp"
#include "idem/errors.hpp"
#include "idem/serializable.hpp"

namespace idem::detail {

// Whatever a user's to_json throws (a JSON error, std::bad_optional_access from an empty
// optional, anything) means the response cannot be stored: it becomes InvalidArgument, which
// the callers record as a permanent failure after the business ran. Let through, it would
// leave the claim to the guard's destructor, which records a retryable failure, and the retry
// would run the business again.
template <Serializable T>
std::string encode_snapshot(const T& value) {
  std::string text;
  try {
    text = nlohmann::json(value).dump();
  } catch (const std::exception& e) {
    throw InvalidArgument(
        fmt::format("idem: the response cannot be serialised to JSON: {}", e.what()));
  } catch (...) {
    throw InvalidArgument(
        "idem: the response cannot be serialised to JSON: its to_json threw a non-standard "
        "exception");
  }
  check_snapshot(text);
  return text;
}

// Errors are recorded even when their content is bad, so that recording a failure never fails
// on its own content: invalid UTF-8 is replaced, and an error over the snapshot limit is
// recorded as a short note that says so.
inline std::string encode_error(const nlohmann::json& error) {
  std::string text = error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > max_snapshot_bytes) {
    text = nlohmann::json{{"error", "idem.error_too_large"}, {"bytes", text.size()}}.dump();
  }
  return text;
}

// The short reason a recorded failure gives (Event::reason): its "error" member, or the error
// itself when it is a string; empty otherwise. A view into `error`.
inline std::string_view failure_reason(const nlohmann::json& error) noexcept {
  const nlohmann::json* reason = &error;
  if (error.is_object()) {
    const auto it = error.find("error");
    if (it == error.end()) return {};
    reason = &*it;
  }
  if (!reason->is_string()) return {};
  return reason->get_ref<const std::string&>();
}

inline nlohmann::json parse_snapshot(std::string_view text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw CorruptRecord(fmt::format("idem: the stored snapshot is not valid JSON: {}", e.what()));
  }
}

// Whether the number j converts to the arithmetic type T without a change of value.
// nlohmann_json converts with a plain cast, undefined behaviour when a float does not fit.
template <class T>
bool number_fits(const nlohmann::json& j) {
  if constexpr (std::is_integral_v<T>) {
    constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    if (j.is_number_unsigned()) return j.get<std::uint64_t>() <= max;
    if (j.is_number_integer()) {
      const auto i = j.get<std::int64_t>();
      if (i >= 0) return static_cast<std::uint64_t>(i) <= max;
      return std::is_signed_v<T> && i >= static_cast<std::int64_t>(std::numeric_limits<T>::min());
    }
    const double d = j.get<double>();
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    const double hi = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
    return d >= lo && d < hi;  // false for NaN too
  } else {
    if (!j.is_number_float()) return true;
    const double d = j.get<double>();
    return d >= std::numeric_limits<T>::lowest() && d <= std::numeric_limits<T>::max();
  }
}

template <class T>
T decode_snapshot(std::string_view text) {
  const nlohmann::json j = parse_snapshot(text);
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (j.is_number() && !number_fits<T>(j)) {
      throw CorruptRecord(fmt::format(
          "idem: the stored snapshot {} does not fit the requested arithmetic type", j.dump()));
    }
  }
  try {
    return j.get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw CorruptRecord(fmt::format(
        "idem: the stored snapshot cannot be read as the requested type: {}", e.what()));
  }
}

}  // namespace idem::detail
