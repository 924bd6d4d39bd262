#pragma once
// The prepared-statement path's buffers: Params bound to MYSQL_BINDs, and result columns
// bound to buffers that become typed Cells (integers as LONGLONG, DATETIMEs as MYSQL_TIME,
// the rest as text). Each is scratch kept on its Connection and reused, so that a statement
// allocates only the rows it returns.

#include <mysql.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "idem/errors.hpp"
#include "idem/mysql/detail/datetime.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/param.hpp"
#include "idem/mysql/row.hpp"

namespace idem::mysql::detail {

// my_bool in MariaDB Connector/C and older libmysqlclient, bool in MySQL 8.
using driver_flag = std::remove_pointer_t<decltype(MYSQL_BIND::is_null)>;

class ParamBinds {
 public:
  // MYSQL_BINDs for params[0..n), valid until the next bind() (they point into the params'
  // text and into this object).
  MYSQL_BIND* bind(const Param* params, std::size_t n) {
    binds_.assign(n, MYSQL_BIND{});
    slots_.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      bind_one(binds_[i], slots_[i], params[i]);
    return binds_.data();
  }

 private:
  struct Slot {  // what a MYSQL_BIND points at that the Param does not hold as bytes
    std::int64_t i64 = 0;
    std::uint64_t u64 = 0;
    unsigned long length = 0;
    MYSQL_TIME time{};
  };

  static void bind_one(MYSQL_BIND& b, Slot& s, const Param& p) {
    switch (p.kind()) {
      case Param::Kind::null:
        b.buffer_type = MYSQL_TYPE_NULL;
        break;
      case Param::Kind::int64:
        s.i64 = p.int64();
        b.buffer_type = MYSQL_TYPE_LONGLONG;
        b.buffer = &s.i64;
        break;
      case Param::Kind::uint64:
        s.u64 = p.uint64();
        b.buffer_type = MYSQL_TYPE_LONGLONG;
        b.buffer = &s.u64;
        b.is_unsigned = 1;
        break;
      case Param::Kind::text:
      case Param::Kind::blob:
        b.buffer_type = p.kind() == Param::Kind::text ? MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
        s.length = static_cast<unsigned long>(p.text().size());
        b.buffer = const_cast<char*>(p.text().data());
        b.buffer_length = s.length;
        b.length = &s.length;
        break;
      case Param::Kind::time:
        s.time = to_mysql_time(p.time_point());
        b.buffer_type = MYSQL_TYPE_DATETIME;
        b.buffer = &s.time;
        break;
    }
  }

  std::vector<MYSQL_BIND> binds_;
  std::vector<Slot> slots_;
};

class ResultBinds {
 public:
  // Every row of the statement's stored result. `types` are its columns' (see column_type);
  // when they do not match the result (no metadata), every column is fetched as text.
  // Throws StoreError.
  std::vector<Row> fetch_all(MYSQL_STMT* stmt, const std::vector<ColumnType>& types) {
    const unsigned columns = mysql_stmt_field_count(stmt);
    bind(stmt, types, columns);
    std::vector<Row> rows;
    while (true) {
      const int rc = mysql_stmt_fetch(stmt);
      if (rc == MYSQL_NO_DATA) break;
      if (rc == 1) throw error_from(stmt, "fetch");
      Row row(columns);
      for (unsigned c = 0; c < columns; ++c)
        row[c] = cell(stmt, c);
      rows.push_back(std::move(row));
    }
    return rows;
  }

 private:
  static constexpr std::size_t initial = 64;  // numbers fit; longer text is fetched again

  void bind(MYSQL_STMT* stmt, const std::vector<ColumnType>& types, unsigned columns) {
    const bool typed = types.size() == columns;
    types_.assign(columns, ColumnType{});
    binds_.assign(columns, MYSQL_BIND{});
    buffers_.resize(columns);
    times_.resize(columns);
    ints_.assign(columns, 0);
    lengths_.assign(columns, 0);
    nulls_.assign(columns, 0);
    errors_.assign(columns, 0);
    for (unsigned c = 0; c < columns; ++c) {
      if (typed) types_[c] = types[c];
      MYSQL_BIND& b = binds_[c];
      switch (types_[c].kind) {
        case Cell::Kind::integer:
          b.buffer_type = MYSQL_TYPE_LONGLONG;
          b.buffer = &ints_[c];
          b.is_unsigned = types_[c].is_unsigned ? 1 : 0;
          break;
        case Cell::Kind::time:
          b.buffer_type = MYSQL_TYPE_DATETIME;
          b.buffer = &times_[c];
          b.buffer_length = sizeof(MYSQL_TIME);
          break;
        case Cell::Kind::null:
        case Cell::Kind::text:
          b.buffer_type = MYSQL_TYPE_STRING;
          b.buffer = buffers_[c].data();
          b.buffer_length = initial;
          break;
      }
      b.length = &lengths_[c];
      b.is_null = &nulls_[c];
      b.error = &errors_[c];
    }
    if (columns > 0 && mysql_stmt_bind_result(stmt, binds_.data()))
      throw error_from(stmt, "bind_result");
  }

  Cell cell(MYSQL_STMT* stmt, unsigned c) {
    if (nulls_[c]) return Cell{};
    switch (types_[c].kind) {
      case Cell::Kind::integer:
        return types_[c].is_unsigned ? Cell::from_uint64(static_cast<std::uint64_t>(ints_[c]))
                                     : Cell::from_int64(ints_[c]);
      case Cell::Kind::time:
        return time_cell(times_[c], types_[c].digits);
      case Cell::Kind::null:
      case Cell::Kind::text:
        break;
    }
    if (lengths_[c] <= initial)
      return Cell::from_text(std::string(buffers_[c].data(), lengths_[c]));
    std::string big(lengths_[c], '\0');
    MYSQL_BIND again{};
    unsigned long got = 0;
    again.buffer_type = MYSQL_TYPE_STRING;
    again.buffer = big.data();
    again.buffer_length = lengths_[c];
    again.length = &got;
    if (mysql_stmt_fetch_column(stmt, &again, c, 0) != 0) throw error_from(stmt, "fetch_column");
    big.resize(got);
    return Cell::from_text(std::move(big));
  }

  std::vector<ColumnType> types_;
  std::vector<MYSQL_BIND> binds_;
  std::vector<std::array<char, initial>> buffers_;
  std::vector<MYSQL_TIME> times_;
  std::vector<std::int64_t> ints_;
  std::vector<unsigned long> lengths_;
  std::vector<driver_flag> nulls_;
  std::vector<driver_flag> errors_;
};

}  // namespace idem::mysql::detail
