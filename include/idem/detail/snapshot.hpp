#pragma once
// Encoding and decoding of response / error snapshots (JSON text in the store).

#include <concepts>
#include <string>
#include <string_view>
#include <typeinfo>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/detail/checks.hpp"
#include "idem/errors.hpp"

namespace idem {

// A response type idem can record: anything nlohmann_json can serialise (to_json / adl_serializer).
template <class T>
concept Serializable = std::constructible_from<nlohmann::json, const T&>;

namespace detail {

template <Serializable T>
std::string encode_snapshot(const T& value) {
  std::string text;
  try {
    text = nlohmann::json(value).dump();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(
        fmt::format("idem: the response cannot be serialised to JSON: {}", e.what()));
  }
  check_snapshot(text);
  return text;
}

// Errors are recorded even when they hold invalid UTF-8 (replaced), so that recording a
// failure never fails on its own content.
inline std::string encode_error(const nlohmann::json& error) {
  std::string text = error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  check_snapshot(text);
  return text;
}

inline nlohmann::json parse_snapshot(std::string_view text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw CorruptRecord(fmt::format("idem: the stored snapshot is not valid JSON: {}", e.what()));
  }
}

template <class T>
T decode_snapshot(std::string_view text) {
  const nlohmann::json j = parse_snapshot(text);
  try {
    return j.get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw CorruptRecord(fmt::format(
        "idem: the stored snapshot cannot be read as the requested type: {}", e.what()));
  }
}

}  // namespace detail
}  // namespace idem
