#pragma once
// idem::Statement: SQL text with `?` placeholders plus its parameters, in placeholder order.
// The backends render what they send as statements (idem::mysql::update_statement,
// idem::sqlite::update_statement, ...) and run them; the core produces none.
//
// Values never travel inside the SQL text: every value is a parameter.

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "idem/sql_value.hpp"

namespace idem {

// SQL text with `?` placeholders and one parameter per placeholder, in order.
struct Statement {
  std::string sql;
  std::vector<SqlValue> params;

  friend bool operator==(const Statement&, const Statement&) = default;
  friend std::ostream& operator<<(std::ostream& os, const Statement& s) {
    os << s.sql << " [";
    for (std::size_t i = 0; i < s.params.size(); ++i)
      os << (i ? ", " : "") << s.params[i];
    return os << ']';
  }
};

}  // namespace idem
