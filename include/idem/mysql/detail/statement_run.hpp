#pragma once
// The rules of running a prepared statement, without I/O: Connection (blocking calls) and
// AsyncConnection (Connector/C's non-blocking calls) each drive Connector/C and ask here what
// follows each answer, so that both handle a statement the same way.

#include <mysql.h>

#include <cstddef>
#include <string>

#include "idem/errors.hpp"
#include "idem/mysql/detail/bind.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/param.hpp"

namespace idem::mysql::detail {

// One statement's run: bind its parameters, execute, and prepare it once more when the server
// says the table changed under the cached statement (an online migration, a FLUSH TABLES).
class StatementRun {
 public:
  enum class Next {
    done,           // executed: read its result or its affected rows
    prepare_again,  // forget the cached statement, prepare it anew and run it again
    fail,           // throw the execute's error
  };

  StatementRun(const std::string& sql, const Param* params, std::size_t n,
               ParamBinds& binds) noexcept
      : sql_(&sql), params_(params), n_(n), binds_(&binds) {}

  // Binds the parameters to `stmt` as prepared (no I/O). Throws UsageError when the statement
  // takes another number of them, StoreError when Connector/C refuses the binds.
  void bind(MYSQL_STMT* stmt) const {
    if (mysql_stmt_param_count(stmt) != n_) {
      throw wrong_param_count(mysql_stmt_param_count(stmt), n_, *sql_);
    }
    MYSQL_BIND* binds = binds_->bind(params_, n_);
    if (n_ > 0 && mysql_stmt_bind_param(stmt, binds)) throw error_from(stmt, "bind");
  }

  // What follows an execute that answered `rc` with the statement's error number `error`.
  Next executed(int rc, unsigned error) noexcept {
    if (rc == 0) return Next::done;
    if (error == need_reprepare && !prepared_again_) {
      prepared_again_ = true;
      return Next::prepare_again;
    }
    return Next::fail;
  }

 private:
  static constexpr unsigned need_reprepare = 1615;  // ER_NEED_REPREPARE

  const std::string* sql_;
  const Param* params_;
  std::size_t n_;
  ParamBinds* binds_;
  bool prepared_again_ = false;
};

// After a statement's result failed (mysql_stmt_store_result) with error number `error`:
// whether the statement must be reset before it runs again. An error that comes after the
// result's metadata (a duplicate key of INSERT ... RETURNING) leaves it mid-result, and
// Connector/C's next execute would wait forever for rows that never come; on a lost
// connection there is nothing to reset (the connection is broken).
constexpr bool reset_after_failed_result(unsigned error) noexcept {
  return !is_connection_lost(error);
}

// Whether a failure leaves the connection broken: the pool closes it and opens another.
inline bool breaks_connection(const StoreError& e) noexcept {
  return is_connection_lost(e.diagnostics().code);
}

}  // namespace idem::mysql::detail
