#pragma once
// The one rule for the table and column names idem puts into SQL text: 1-64 characters of
// [A-Za-z0-9_$], a table optionally qualified as schema.table. Each backend quotes a name
// that passes in its own dialect (idem::mysql with backticks, idem::sqlite with double quotes).
//
// The rule is deliberately narrower than what either database accepts inside quotes, so that
// a valid name never holds a quote character, a dot or anything else that needs escaping.

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"

namespace idem::detail {

inline bool is_plain_identifier(std::string_view part) noexcept {
  if (part.empty() || part.size() > 64) return false;
  for (char c : part) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '$';
    if (!ok) return false;
  }
  return true;
}

// A valid name, split. The views point into the name that was split.
struct IdentifierParts {
  std::string_view schema;  // empty: unqualified
  std::string_view name;
};

// Validates `name` (with `qualified`, schema.name is accepted too) and splits it. Throws
// InvalidArgument naming who refused which name: `owner` ("idem::mysql"), `role` ("table").
inline IdentifierParts split_identifier(std::string_view name, std::string_view owner,
                                        std::string_view role, bool qualified = false) {
  if (is_plain_identifier(name)) return {{}, name};
  if (qualified) {
    const auto dot = name.find('.');
    if (dot != std::string_view::npos && is_plain_identifier(name.substr(0, dot)) &&
        is_plain_identifier(name.substr(dot + 1))) {
      return {name.substr(0, dot), name.substr(dot + 1)};
    }
  }
  throw InvalidArgument(
      fmt::format("{}: {} \"{}\" is not a valid identifier (1-64 characters of [A-Za-z0-9_$]{})",
                  owner, role, printable(name), qualified ? ", optionally schema.table" : ""));
}

// A name split_identifier accepted, each part between `quote` characters (the dialect's): a
// valid part never holds one, so nothing needs escaping.
inline std::string quote_parts(const IdentifierParts& parts, char quote) {
  if (parts.schema.empty()) return fmt::format("{0}{1}{0}", quote, parts.name);
  return fmt::format("{0}{1}{0}.{0}{2}{0}", quote, parts.schema, parts.name);
}

}  // namespace idem::detail
