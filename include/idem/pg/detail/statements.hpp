#pragma once
// What idem::pg::Connection and idem::pg::AsyncConnection share about running a statement:
// the parameters as libpq takes them, the names of the statements prepared on a connection,
// and how a command's result becomes a value or a StoreError.

#include <libpq-fe.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/pg/errors.hpp"
#include "idem/pg/param.hpp"
#include "idem/pg/result.hpp"

namespace idem::pg::detail {

// The parameters as libpq takes them: text pointers (NULL for SQL NULL) and lengths. Refers to
// the Params' text, which must outlive it.
class Values {
 public:
  explicit Values(const std::vector<Param>& params) {
    values_.reserve(params.size());
    lengths_.reserve(params.size());
    for (const Param& p : params) {
      values_.push_back(p.is_null() ? nullptr : p.text().c_str());
      lengths_.push_back(static_cast<int>(p.text().size()));
    }
  }
  int count() const noexcept { return static_cast<int>(values_.size()); }
  const char* const* values() const noexcept { return values_.data(); }
  const int* lengths() const noexcept { return lengths_.data(); }

 private:
  std::vector<const char*> values_;
  std::vector<int> lengths_;
};

// The statements prepared on one connection, by their SQL text. Bounded: statements built per
// call (a service's own through idem::pg::execute) run unprepared once it is full.
class PreparedNames {
 public:
  static constexpr std::size_t max_prepared = 256;

  // The name `sql` was prepared under, or nullptr.
  const std::string* find(const std::string& sql) const {
    const auto it = names_.find(sql);
    return it == names_.end() ? nullptr : &it->second;
  }
  bool full() const noexcept { return names_.size() >= max_prepared; }
  // The name to prepare the next statement under.
  std::string next_name() const { return fmt::format("idem_{}", names_.size() + 1); }
  // Records that `sql` is prepared as `name`; returns the stored name.
  const std::string& prepared(const std::string& sql, std::string name) {
    return names_.emplace(sql, std::move(name)).first->second;
  }
  // A new session has none of the old one's.
  void clear() noexcept { names_.clear(); }

 private:
  std::unordered_map<std::string, std::string> names_;  // SQL text -> prepared name
};

// `r` when it is a successful command's; otherwise its error as StoreError, after setting
// `broken` when the error means the connection is lost.
inline Result checked(PGconn* conn, Result r, std::string_view context, bool& broken) {
  const ExecStatusType status =
      r.native() != nullptr ? PQresultStatus(r.native()) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return r;
  StoreError e = error_from(conn, r.native(), context);
  if (is_connection_lost(e.diagnostics().sqlstate)) broken = true;
  throw e;
}

}  // namespace idem::pg::detail
