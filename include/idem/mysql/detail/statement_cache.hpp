#pragma once
// A connection's prepared statements, by SQL text: each is prepared once, on first use, and
// kept with its result columns' types until the connection closes (after a reconnect every
// statement is prepared again).

#include <mysql.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "idem/errors.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/row.hpp"

namespace idem::mysql::detail {

struct Prepared {
  MYSQL_STMT* stmt = nullptr;
  // The result columns' types (see column_type), read once from the statement's metadata
  // after its first execution; empty until then, and for statements without a result.
  std::vector<ColumnType> columns;
  bool columns_known = false;
};

class StatementCache {
 public:
  StatementCache() = default;
  StatementCache(const StatementCache&) = delete;
  StatementCache& operator=(const StatementCache&) = delete;

  // The statement for `sql` on `mysql`, prepared now if it was not yet. Throws StoreError.
  Prepared& get(MYSQL* mysql, const std::string& sql) {
    if (Prepared* p = find(sql)) return *p;
    MYSQL_STMT* stmt = mysql_stmt_init(mysql);
    if (stmt == nullptr) throw error_from(mysql, "mysql_stmt_init");
    if (mysql_stmt_prepare(stmt, sql.data(), static_cast<unsigned long>(sql.size())) != 0) {
      StoreError e = error_from(stmt, "prepare");
      mysql_stmt_close(stmt);
      throw e;
    }
    return adopt(sql, stmt);
  }

  // The statement for `sql` if it was prepared, else null.
  Prepared* find(const std::string& sql) noexcept {
    auto it = statements_.find(sql);
    return it == statements_.end() ? nullptr : &it->second;
  }
  // Keeps a statement prepared elsewhere (the non-blocking connection prepares its own).
  Prepared& adopt(const std::string& sql, MYSQL_STMT* stmt) {
    return statements_.emplace(sql, Prepared{stmt, {}, false}).first->second;
  }

  // Drops one statement (the server said the table changed under it: ER_NEED_REPREPARE).
  void forget(const std::string& sql) noexcept {
    if (auto it = statements_.find(sql); it != statements_.end()) {
      mysql_stmt_close(it->second.stmt);
      statements_.erase(it);
    }
  }

  // Closes every statement; before the connection itself closes.
  void clear() noexcept {
    for (auto& [sql, prepared] : statements_)
      mysql_stmt_close(prepared.stmt);
    statements_.clear();
  }

  static const std::vector<ColumnType>& columns(Prepared& p) {
    if (p.columns_known) return p.columns;
    p.columns.clear();
    if (MYSQL_RES* meta = mysql_stmt_result_metadata(p.stmt)) {
      p.columns = column_types(mysql_fetch_fields(meta), mysql_num_fields(meta));
      mysql_free_result(meta);
    }
    p.columns_known = true;
    return p.columns;
  }

 private:
  std::unordered_map<std::string, Prepared> statements_;  // node-based: references stay valid
};

}  // namespace idem::mysql::detail
