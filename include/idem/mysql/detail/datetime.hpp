#pragma once
// DATETIME values between the client library's MYSQL_TIME, the server's text form
// ("YYYY-MM-DD HH:MM:SS[.ffffff]") and std::chrono, in UTC (idem writes and compares
// UTC_TIMESTAMP(3)). Microseconds throughout: a DATETIME(6) survives unchanged, and
// idem::TimePoint (milliseconds) converts to it without loss.

#include <mysql.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace idem::mysql::detail {

using Micros = std::chrono::sys_time<std::chrono::microseconds>;

inline MYSQL_TIME to_mysql_time(Micros t) noexcept {
  const auto day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss<std::chrono::microseconds> tod{t - day};
  MYSQL_TIME m{};
  m.year = static_cast<unsigned>(static_cast<int>(ymd.year()));
  m.month = static_cast<unsigned>(ymd.month());
  m.day = static_cast<unsigned>(ymd.day());
  m.hour = static_cast<unsigned>(tod.hours().count());
  m.minute = static_cast<unsigned>(tod.minutes().count());
  m.second = static_cast<unsigned>(tod.seconds().count());
  m.second_part = static_cast<unsigned long>(tod.subseconds().count());
  m.time_type = MYSQL_TIMESTAMP_DATETIME;
  return m;
}

// The instant a DATETIME names; nullopt for what names none (zero dates such as
// 0000-00-00, TIME values, out-of-range fields).
inline std::optional<Micros> from_mysql_time(const MYSQL_TIME& m) noexcept {
  // DATE too: the binary protocol sends a DATETIME at midnight without its time, and the
  // driver then marks it a DATE.
  if (m.neg || (m.time_type != MYSQL_TIMESTAMP_DATETIME && m.time_type != MYSQL_TIMESTAMP_DATE))
    return std::nullopt;
  const std::chrono::year_month_day ymd{std::chrono::year{static_cast<int>(m.year)},
                                        std::chrono::month{m.month}, std::chrono::day{m.day}};
  if (m.year > 9999 || !ymd.ok() || m.hour > 23 || m.minute > 59 || m.second > 59 ||
      m.second_part > 999'999)
    return std::nullopt;
  return Micros{std::chrono::sys_days{ymd}} + std::chrono::hours{m.hour} +
         std::chrono::minutes{m.minute} + std::chrono::seconds{m.second} +
         std::chrono::microseconds{static_cast<std::chrono::microseconds::rep>(m.second_part)};
}

// "YYYY-MM-DD HH:MM:SS[.f...]" with `digits` (0-6) fraction digits: the server's text form.
// Written by hand: the driver's own conversion goes through sprintf, which profiling showed
// as the largest client cost of a claim.
inline std::string datetime_text(const MYSQL_TIME& t, unsigned digits) {
  char out[26];
  auto put = [&](std::size_t at, unsigned long v, std::size_t width) {
    for (std::size_t i = width; i-- > 0; v /= 10)
      out[at + i] = static_cast<char>('0' + v % 10);
  };
  put(0, t.year, 4);
  out[4] = '-';
  put(5, t.month, 2);
  out[7] = '-';
  put(8, t.day, 2);
  out[10] = ' ';
  put(11, t.hour, 2);
  out[13] = ':';
  put(14, t.minute, 2);
  out[16] = ':';
  put(17, t.second, 2);
  std::size_t size = 19;
  if (digits > 6) digits = 6;
  if (digits > 0) {
    unsigned long fraction = t.second_part;
    for (unsigned i = digits; i < 6; ++i)
      fraction /= 10;
    out[19] = '.';
    put(20, fraction, digits);
    size = 20 + digits;
  }
  return std::string(out, size);
}

// The server's text form of a DATETIME back into fields; nullopt unless `text` is exactly
// "YYYY-MM-DD HH:MM:SS" with an optional '.' and 1-6 fraction digits. The fields are not
// range-checked here: from_mysql_time does that.
inline std::optional<MYSQL_TIME> parse_datetime(std::string_view text) noexcept {
  const std::size_t n = text.size();
  if (n < 19 || (n > 19 && (text[19] != '.' || n == 20 || n > 26))) return std::nullopt;
  bool ok = true;
  auto num = [&](std::size_t at, std::size_t width) {
    unsigned v = 0;
    for (std::size_t i = at; i < at + width; ++i) {
      const char c = text[i];
      ok = ok && c >= '0' && c <= '9';
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    return v;
  };
  MYSQL_TIME m{};
  m.year = num(0, 4);
  m.month = num(5, 2);
  m.day = num(8, 2);
  m.hour = num(11, 2);
  m.minute = num(14, 2);
  m.second = num(17, 2);
  if (n > 20) {
    unsigned long fraction = num(20, n - 20);
    for (std::size_t i = n - 20; i < 6; ++i)
      fraction *= 10;
    m.second_part = fraction;
  }
  m.time_type = MYSQL_TIMESTAMP_DATETIME;
  ok = ok && text[4] == '-' && text[7] == '-' && text[10] == ' ' && text[13] == ':' &&
       text[16] == ':';
  if (!ok) return std::nullopt;
  return m;
}

}  // namespace idem::mysql::detail
