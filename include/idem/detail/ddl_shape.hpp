#pragma once
// The shape of a record table read back from the DDL idem creates it with (columns with their
// types, the primary key, the indexes), so that a store's schema check compares a live table
// against the one DDL text there is, not against a second copy of it. The DDL is idem's own:
// one column or key per line, as record_table_ddl() writes it.

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace idem::detail {

struct DdlColumn {
  std::string name;
  std::string type;       // lower case, as written: "varbinary(64)", "bigint unsigned"
  std::string collation;  // after COLLATE, lower case; empty when none is written
  bool nullable = true;   // false when the line says NOT NULL
  std::string line;       // the definition without its name and COMMENT, single-spaced
  std::string comment;    // "COMMENT '...'" as written; empty when there is none
};

struct DdlIndex {
  std::string name;  // "PRIMARY" for the primary key
  std::vector<std::string> columns;
};

struct DdlShape {
  std::vector<DdlColumn> columns;
  std::vector<DdlIndex> indexes;  // the primary key first
};

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline std::vector<std::string> split_words(std::string_view s) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
      ++i;
    const std::size_t b = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i])))
      ++i;
    if (i > b) words.emplace_back(s.substr(b, i - b));
  }
  return words;
}

// "(a, `b`)" -> {"a", "b"}
inline std::vector<std::string> column_list(std::string_view s) {
  std::vector<std::string> names;
  const auto open = s.find('(');
  const auto close = s.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return names;
  std::string current;
  for (char c : s.substr(open + 1, close - open - 1)) {
    if (c == ',') {
      names.push_back(current);
      current.clear();
    } else if (c != '`' && c != '"' && !std::isspace(static_cast<unsigned char>(c))) {
      current += c;
    }
  }
  if (!current.empty()) names.push_back(current);
  return names;
}

// Reads record_table_ddl()'s text: the lines between its first "(" and the matching end of
// the column list; a trailing CREATE INDEX statement (SQLite's) adds an index.
inline DdlShape ddl_shape(std::string_view ddl) {
  DdlShape shape;
  std::size_t at = 0;
  while (at < ddl.size()) {
    std::size_t end = ddl.find('\n', at);
    if (end == std::string_view::npos) end = ddl.size();
    std::string_view line = ddl.substr(at, end - at);
    at = end + 1;
    if (const auto dashes = line.find("--"); dashes != std::string_view::npos)
      line = line.substr(0, dashes);  // SQLite's comments
    while (!line.empty() &&
           (std::isspace(static_cast<unsigned char>(line.back())) || line.back() == ','))
      line.remove_suffix(1);
    const auto words = split_words(line);
    if (words.empty()) continue;
    const std::string first = lower(words[0]);
    if (first == "create") {
      if (words.size() > 1 && lower(words[1]) == "index") {
        // CREATE INDEX IF NOT EXISTS "t_idx_expire" ON "t" (expire_at);
        std::size_t name_at = 2;
        while (name_at < words.size() &&
               (lower(words[name_at]) == "if" || lower(words[name_at]) == "not" ||
                lower(words[name_at]) == "exists"))
          ++name_at;
        std::string name = name_at < words.size() ? words[name_at] : "";
        std::erase(name, '"');
        if (const auto dot = name.rfind('.'); dot != std::string::npos) name.erase(0, dot + 1);
        shape.indexes.push_back({name, column_list(line)});
      }
      continue;
    }
    if (first == "primary") {
      shape.indexes.insert(shape.indexes.begin(), DdlIndex{"PRIMARY", column_list(line)});
      continue;
    }
    if (first == "key" || first == "index") {
      shape.indexes.push_back({words.size() > 1 ? words[1] : "", column_list(line)});
      continue;
    }
    if (first.starts_with(")") || words.size() < 2 || line.front() != ' ') continue;
    DdlColumn c;
    c.name = words[0];
    // The type runs until the first word that is not part of it.
    std::size_t w = 1;
    const auto ends_type = [](const std::string& word) {
      return word == "not" || word == "null" || word == "default" || word == "comment" ||
             word == "character" || word == "collate";
    };
    for (; w < words.size() && !ends_type(lower(words[w])); ++w)
      c.type += (c.type.empty() ? "" : " ") + lower(words[w]);
    for (std::size_t i = w; i < words.size(); ++i) {
      const std::string word = lower(words[i]);
      if (word == "comment") break;
      if (word == "collate" && i + 1 < words.size()) c.collation = lower(words[i + 1]);
      if (word == "not" && i + 1 < words.size() && lower(words[i + 1]) == "null")
        c.nullable = false;
    }
    // The definition as one would type it: the words up to COMMENT, single-spaced (the DDL
    // pads them into columns).
    for (std::size_t i = 1; i < words.size() && lower(words[i]) != "comment"; ++i)
      c.line += (c.line.empty() ? "" : " ") + words[i];
    if (const auto from = lower(line).find(" comment '"); from != std::string::npos)
      c.comment = std::string(line.substr(from + 1));
    shape.columns.push_back(std::move(c));
  }
  return shape;
}

}  // namespace idem::detail
