#pragma once
// idem::pg::Result: a command's result on idem::pg's connections (rows as text, or the rows a
// write changed), owning libpq's PGresult.

#include <libpq-fe.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

namespace idem::pg {

// A command's result: its rows as text, or the rows it changed.
class Result {
 public:
  explicit Result(PGresult* result) noexcept : result_(result) {}
  Result(Result&& other) noexcept : result_(std::exchange(other.result_, nullptr)) {}
  Result& operator=(Result&& other) noexcept {
    std::swap(result_, other.result_);
    return *this;
  }
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  ~Result() { PQclear(result_); }

  int rows() const noexcept { return PQntuples(result_); }
  int columns() const noexcept { return PQnfields(result_); }
  bool is_null(int row, int column) const noexcept {
    return PQgetisnull(result_, row, column) != 0;
  }
  std::string_view text(int row, int column) const noexcept {
    return {PQgetvalue(result_, row, column),
            static_cast<std::size_t>(PQgetlength(result_, row, column))};
  }
  // An integer column's value; nullopt for NULL or anything but an integer.
  std::optional<std::int64_t> integer(int row, int column) const noexcept {
    if (is_null(row, column)) return std::nullopt;
    const std::string_view t = text(row, column);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || end != t.data() + t.size()) return std::nullopt;
    return v;
  }
  // The rows an INSERT, UPDATE or DELETE wrote.
  std::uint64_t affected() const noexcept {
    const std::string_view t = PQcmdTuples(result_);
    std::uint64_t n = 0;
    std::from_chars(t.data(), t.data() + t.size(), n);
    return n;
  }
  PGresult* native() const noexcept { return result_; }

 private:
  PGresult* result_;
};

}  // namespace idem::pg
