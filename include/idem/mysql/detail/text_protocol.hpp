#pragma once
// The borrowed-handle path (Connection(MYSQL*)): a statement travels as SQL text with every
// `?` replaced by its value as a literal, and its result comes back as text that the row
// layer types by column (see text_cell). Text and blobs become X'<hex>', never a quoted
// string, so no character set, sql_mode (NO_BACKSLASH_ESCAPES, ANSI_QUOTES) or byte can
// change them; a prepared statement cached on a handle idem does not own would outlive the
// caller's next mysql_close() or mysql_change_user().

#include <mysql.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/mysql/detail/datetime.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/param.hpp"
#include "idem/mysql/row.hpp"

namespace idem::mysql::detail {

// `sql` with every `?` placeholder replaced by its parameter as a literal. A `?` inside '...',
// "..." or `...` is text, not a placeholder; inside quotes a backslash escapes the next
// character unless the session runs with NO_BACKSLASH_ESCAPES (`backslash_escapes` false),
// as the server reads it. Throws UsageError when the placeholders do not match n.
inline std::string inline_params(std::string_view sql, const Param* params, std::size_t n,
                                 bool backslash_escapes) {
  std::string out;
  out.reserve(sql.size() + 32 * n);
  std::size_t placeholders = 0;
  char quote = 0;  // the quote of the literal or identifier being copied, if any
  for (std::size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (quote != 0) {
      out += c;
      if (c == '\\' && backslash_escapes && quote != '`' && i + 1 < sql.size()) {
        out += sql[++i];  // an escaped character, the closing quote included
      } else if (c == quote) {
        quote = 0;  // a doubled quote closes and reopens: the same text either way
      }
      continue;
    }
    if (c == '\'' || c == '"' || c == '`') quote = c;
    if (c != '?') {
      out += c;
      continue;
    }
    if (placeholders++ >= n) continue;  // counted, and refused below
    const Param& p = params[placeholders - 1];
    switch (p.kind()) {
      case Param::Kind::null:
        out += "NULL";
        break;
      case Param::Kind::int64:
        out += fmt::format_int(p.int64()).c_str();
        break;
      case Param::Kind::uint64:
        out += fmt::format_int(p.uint64()).c_str();
        break;
      case Param::Kind::text:
      case Param::Kind::blob: {
        constexpr char digits[] = "0123456789ABCDEF";
        out += "X'";
        for (const char byte : p.text()) {
          const auto b = static_cast<unsigned char>(byte);
          out += digits[b >> 4];
          out += digits[b & 0xF];
        }
        out += '\'';
        break;
      }
      case Param::Kind::time:
        out += "TIMESTAMP'";
        out += datetime_text(to_mysql_time(p.time_point()), 3);
        out += '\'';
        break;
    }
  }
  if (placeholders != n) throw wrong_param_count(placeholders, n, sql);
  return out;
}

// The statement's text for this session: its parameters inlined as its sql_mode reads them.
inline std::string text_statement(MYSQL* mysql, std::string_view sql, const Param* params,
                                  std::size_t n) {
  const bool backslash_escapes = (mysql->server_status & SERVER_STATUS_NO_BACKSLASH_ESCAPES) == 0;
  return inline_params(sql, params, n, backslash_escapes);
}

// Sends the statement as text and stores its result (null for a statement without one).
// Throws StoreError, UsageError.
inline MYSQL_RES* send_text(MYSQL* mysql, std::string_view sql, const Param* params,
                            std::size_t n) {
  const std::string text = text_statement(mysql, sql, params, n);
  if (mysql_real_query(mysql, text.data(), static_cast<unsigned long>(text.size())) != 0)
    throw error_from(mysql, "query");
  MYSQL_RES* res = mysql_store_result(mysql);
  if (res == nullptr && mysql_field_count(mysql) != 0) throw error_from(mysql, "store_result");
  return res;
}

// Every row of a stored text result, typed by its columns; frees `res`. Throws StoreError.
inline std::vector<Row> fetch_text_rows(MYSQL* mysql, MYSQL_RES* res) {
  struct Free {
    MYSQL_RES* r;
    ~Free() { mysql_free_result(r); }
  } free_result{res};
  const unsigned columns = mysql_num_fields(res);
  const std::vector<ColumnType> types = column_types(mysql_fetch_fields(res), columns);
  std::vector<Row> rows;
  while (MYSQL_ROW r = mysql_fetch_row(res)) {
    const unsigned long* lengths = mysql_fetch_lengths(res);
    Row row(columns);
    for (unsigned c = 0; c < columns; ++c) {
      if (r[c] != nullptr) row[c] = text_cell(types[c], std::string_view(r[c], lengths[c]));
    }
    rows.push_back(std::move(row));
  }
  if (mysql_errno(mysql) != 0)
    throw error_from(mysql, "fetch_row");  // fetch_row ends on errors too
  return rows;
}

}  // namespace idem::mysql::detail
