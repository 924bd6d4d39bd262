#pragma once
// idem::GuardedTransition: one guarded move as data, which a backend renders in its dialect
// (idem/backend/transition_sql.hpp) and runs.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "idem/sql_value.hpp"

namespace idem {

// One guarded move, as data: which row, which columns, and the values the status column
// stores (the enum's integer, or its mapped name). A backend renders it in its dialect as
//   UPDATE table SET status = to[, version = version + 1]
//    WHERE key_column = key AND status = from[ AND version = expected_version]
// with every value a bound parameter, and reads the row (status[, version]) to explain a
// rejection.
struct GuardedTransition {
  std::string table;       // t_order, or schema.t_order
  std::string key_column;  // names one row: a primary or unique key
  SqlValue key;            // never NULL
  std::string status_column;
  SqlValue from;
  SqlValue to;
  std::string version_column{};                    // empty: compare-and-set on the status alone
  std::optional<std::int64_t> expected_version{};  // set exactly when version_column is

  bool versioned() const noexcept { return !version_column.empty(); }

  friend bool operator==(const GuardedTransition&, const GuardedTransition&) = default;
  // For logs and test failure messages: t_order[order_no = "A1"]: status 1 -> 3, version 7
  friend std::ostream& operator<<(std::ostream& os, const GuardedTransition& t) {
    os << t.table << '[' << t.key_column << " = " << t.key << "]: " << t.status_column << ' '
       << t.from << " -> " << t.to;
    if (t.versioned()) {
      os << ", " << t.version_column << ' ';
      if (t.expected_version) {
        os << *t.expected_version;
      } else {
        os << "(none)";
      }
    }
    return os;
  }
};

}  // namespace idem
