#pragma once
// idem::Key: what makes two requests "the same operation". Validated at construction so
// that a bad key fails before it reaches any store; compared byte for byte.

#include <compare>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/detail/utf8.hpp"
#include "idem/errors.hpp"

namespace idem {

// 1-32 bytes of [A-Za-z0-9_.-]: a name for the business domain (PAY, REFUND, order.create).
inline constexpr std::size_t max_biz_type_bytes = 32;
// 1-64 bytes of UTF-8 without control characters: the stable id of one business action.
inline constexpr std::size_t max_id_bytes = 64;

namespace detail {

inline std::string printable(std::string_view s) {
  std::string out;
  for (const char ch : s.substr(0, 80)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (s.size() > 80) out += "...";
  return out;
}

inline void validate_biz_type(std::string_view biz_type) {
  if (biz_type.empty() || biz_type.size() > max_biz_type_bytes) {
    throw InvalidArgument(
        fmt::format("idem::Key: biz_type must be 1-{} bytes of [A-Za-z0-9_.-], got {} bytes",
                    max_biz_type_bytes, biz_type.size()));
  }
  for (std::size_t i = 0; i < biz_type.size(); ++i) {
    const char c = biz_type[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) {
      throw InvalidArgument(fmt::format(
          "idem::Key: biz_type must be 1-{} bytes of [A-Za-z0-9_.-]; byte {} of \"{}\" is not",
          max_biz_type_bytes, i, printable(biz_type)));
    }
  }
}

inline void validate_id(std::string_view id) {
  if (id.empty() || id.size() > max_id_bytes) {
    throw InvalidArgument(fmt::format(
        "idem::Key: id must be 1-{} bytes of UTF-8 without control characters, got {} bytes",
        max_id_bytes, id.size()));
  }
  const TextCheck check = check_text(id);
  if (check.fault == TextFault::invalid_utf8) {
    throw InvalidArgument(fmt::format("idem::Key: id must be valid UTF-8; byte {} of \"{}\" is not",
                                      check.offset, printable(id)));
  }
  if (check.fault == TextFault::control_character) {
    throw InvalidArgument(
        fmt::format("idem::Key: id must not contain control characters; byte {} of \"{}\" is one",
                    check.offset, printable(id)));
  }
}

}  // namespace detail

class Key {
 public:
  // Throws idem::InvalidArgument naming the field and the rule it breaks.
  Key(std::string biz_type, std::string id) : biz_type_(std::move(biz_type)), id_(std::move(id)) {
    detail::validate_biz_type(biz_type_);
    detail::validate_id(id_);
  }

  const std::string& biz_type() const noexcept { return biz_type_; }
  const std::string& id() const noexcept { return id_; }

  friend bool operator==(const Key&, const Key&) = default;
  friend std::strong_ordering operator<=>(const Key&, const Key&) = default;

 private:
  std::string biz_type_;
  std::string id_;
};

// Joins parts into one id with ':' (e.g. user id + client request id). Each part must be
// non-empty and free of ':' so that different part lists can never produce the same id;
// the result must satisfy the id rule. Throws idem::InvalidArgument otherwise.
inline std::string compose_id(std::initializer_list<std::string_view> parts) {
  if (parts.size() == 0) throw InvalidArgument("idem::compose_id: needs at least one part");
  std::string id;
  std::size_t index = 0;
  for (std::string_view part : parts) {
    if (part.empty()) {
      throw InvalidArgument(fmt::format("idem::compose_id: part {} is empty", index));
    }
    if (part.find(':') != std::string_view::npos) {
      throw InvalidArgument(
          fmt::format("idem::compose_id: part {} (\"{}\") contains the separator ':'", index,
                      detail::printable(part)));
    }
    if (index > 0) id += ':';
    id += part;
    ++index;
  }
  if (id.size() > max_id_bytes) {
    throw InvalidArgument(fmt::format(
        "idem::compose_id: the composed id is {} bytes, over the {}-byte limit of an id", id.size(),
        max_id_bytes));
  }
  detail::validate_id(id);
  return id;
}

}  // namespace idem

template <>
struct std::hash<idem::Key> {
  std::size_t operator()(const idem::Key& key) const noexcept {
    const std::size_t a = std::hash<std::string_view>{}(key.biz_type());
    const std::size_t b = std::hash<std::string_view>{}(key.id());
    return a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  }
};
