#pragma once
// How idem::sqlite reads SQLite result codes. Every failure surfaces as idem::StoreError whose
// diagnostics() carry the extended result code (e.g. 5 SQLITE_BUSY, 26 SQLITE_NOTADB, 1555
// SQLITE_CONSTRAINT_PRIMARYKEY) and sqlite3_errmsg's text; these helpers say what a code means.

#include <sqlite3.h>

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"

namespace idem::sqlite {

// Another connection (thread or process) held a lock longer than the busy timeout, or the
// WAL index was being rebuilt: repeating the same call (after a rollback) may succeed.
constexpr bool is_transient(int code) noexcept {
  const int primary = code & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_PROTOCOL;
}

// The file or the connection is in a state where the connection should not be reused
// (corrupt or foreign file, I/O error, out of memory): the pool closes it instead.
constexpr bool is_fatal_to_connection(int code) noexcept {
  const int primary = code & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB || primary == SQLITE_IOERR ||
         primary == SQLITE_CANTOPEN || primary == SQLITE_NOMEM || primary == SQLITE_FULL;
}

// A constraint of the table refused the statement (the claim's INSERT expects
// SQLITE_CONSTRAINT_PRIMARYKEY when the key is already there).
constexpr bool is_constraint(int code) noexcept {
  return (code & 0xff) == SQLITE_CONSTRAINT;
}

namespace detail {

// The StoreError for a failed call on `db` (may be null when the open itself failed) that
// returned `rc`. The extended code comes from the connection when it agrees with rc.
inline StoreError make_error(std::string_view context, sqlite3* db, int rc, std::string_view file) {
  int code = rc;
  if (db != nullptr) {
    const int extended = sqlite3_extended_errcode(db);
    if ((extended & 0xff) == (rc & 0xff)) code = extended;
  }
  const char* text = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string message = text != nullptr ? text : "";
  const bool retryable = is_transient(code);
  std::string what =
      fmt::format("idem::sqlite: {} failed on {}: {} (SQLite result code {}{})", context, file,
                  message, code, retryable ? ", another connection holds the lock; retryable" : "");
  return StoreError(what, retryable,
                    Diagnostics{static_cast<unsigned>(code), "", std::move(message), false});
}

}  // namespace detail

}  // namespace idem::sqlite
