#pragma once
// A record (and a table's counts and layout) as the admin program shows it: every field, times in
// UTC with how long ago (or how far ahead) they are, for a person; or as JSON, for a script.

#include <chrono>
#include <cstdint>
#include <string>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <idem/backend/record_rules.hpp>
#include <idem/clock.hpp>
#include <idem/record.hpp>
#include <idem/record_stats.hpp>
#include <idem/status.hpp>
#include <idem/table_layout.hpp>

namespace idem_admin {

// 2026-12-04T10:31:02.123Z
inline std::string utc(idem::TimePoint t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::chrono::sys_seconds s{std::chrono::floor<std::chrono::seconds>(ms)};
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", s, (ms - s.time_since_epoch()).count());
}

// "3 h 5 min", "12 s", "850 ms": the two largest units.
inline std::string span(std::chrono::milliseconds d) {
  using namespace std::chrono;
  const auto ms = d.count() < 0 ? -d : d;
  if (ms < 1s) return fmt::format("{} ms", ms.count());
  if (ms < 1min) return fmt::format("{} s", duration_cast<seconds>(ms).count());
  if (ms < 1h) {
    return fmt::format("{} min {} s", duration_cast<minutes>(ms).count(),
                       duration_cast<seconds>(ms % 1min).count());
  }
  if (ms < days{1}) {
    return fmt::format("{} h {} min", duration_cast<hours>(ms).count(),
                       duration_cast<minutes>(ms % 1h).count());
  }
  return fmt::format("{} d {} h", duration_cast<days>(ms).count(),
                     duration_cast<hours>(ms % days{1}).count());
}

// "2026-12-04T10:31:02.123Z (5 min 2 s ago)" or "(in 25 s)".
inline std::string when(idem::TimePoint t, idem::TimePoint now) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - now);
  return fmt::format("{} ({})", utc(t), d.count() < 0 ? span(d) + " ago" : "in " + span(d));
}

inline std::string text(const idem::Record& r, idem::TimePoint now) {
  std::string out = fmt::format("{}/{}\n", r.key.biz_type(), r.key.id());
  const auto line = [&](std::string_view name, const std::string& value) {
    out += fmt::format("  {:<16}{}\n", name, value);
  };
  line("status", fmt::format("{} ({}){}", idem::to_string(r.status), static_cast<int>(r.status),
                             idem::backend::is_stale(r, now) ? ", stale: its lease ran out" : ""));
  line("fence", std::to_string(r.ticket.fence));
  line("owner", r.ticket.owner);
  line("attempts", std::to_string(r.attempts));
  if (r.status == idem::Status::failed) line("retryable", r.retryable ? "yes" : "no");
  line("fingerprint", r.fingerprint.empty() ? "(none)" : r.fingerprint);
  line("created_at", when(r.created_at, now));
  line("updated_at", when(r.updated_at, now));
  if (r.status == idem::Status::processing) line("lease_until", when(r.lease_until, now));
  line("expire_at", when(r.expire_at, now));
  line("repaired_at", r.repaired_at ? when(*r.repaired_at, now) : "never");
  if (!r.repair_reason.empty()) line("repair_reason", r.repair_reason);
  line("snapshot", r.snapshot.empty() ? "(none)" : r.snapshot);
  if (!r.recovery_points.empty()) line("recovery_points", r.recovery_points);
  return out;
}

// The short form of `list`: one line per record.
inline std::string row(const idem::Record& r, idem::TimePoint now) {
  const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - r.updated_at);
  return fmt::format("{}/{}  {}  fence {}  attempts {}  updated {} ago{}\n", r.key.biz_type(),
                     r.key.id(), idem::to_string(r.status), r.ticket.fence, r.attempts, span(age),
                     idem::backend::is_stale(r, now) ? "  stale" : "");
}

inline nlohmann::json json(const idem::Record& r) {
  const auto ms = [](idem::TimePoint t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  const auto time = [&](idem::TimePoint t) {
    return nlohmann::json{{"utc", utc(t)}, {"unix_ms", ms(t)}};
  };
  nlohmann::json j{{"biz_type", r.key.biz_type()},
                   {"id", r.key.id()},
                   {"status", idem::to_string(r.status)},
                   {"fence", r.ticket.fence},
                   {"owner", r.ticket.owner},
                   {"attempts", r.attempts},
                   {"retryable", r.retryable},
                   {"fingerprint", r.fingerprint},
                   {"created_at", time(r.created_at)},
                   {"updated_at", time(r.updated_at)},
                   {"lease_until", time(r.lease_until)},
                   {"expire_at", time(r.expire_at)},
                   {"repaired_at", r.repaired_at ? time(*r.repaired_at) : nlohmann::json()},
                   {"repair_reason", r.repair_reason}};
  // The snapshot and the points are JSON text: embedded as JSON when they parse.
  const auto embedded = [](const std::string& s) {
    if (s.empty()) return nlohmann::json();
    auto parsed = nlohmann::json::parse(s, nullptr, false);
    return parsed.is_discarded() ? nlohmann::json(s) : parsed;
  };
  j["snapshot"] = embedded(r.snapshot);
  j["recovery_points"] = embedded(r.recovery_points);
  return j;
}

// "12.5 MiB", "840 B".
inline std::string bytes(std::uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n) / 1024;
  std::size_t u = 0;
  for (; v >= 1024 && u + 1 < std::size(units); ++u)
    v /= 1024;
  return fmt::format("{:.1f} {}", v, units[u]);
}

inline std::string text(const idem::RecordStats& s) {
  std::string out = fmt::format("{:<24}{:<18}{:>12}\n", "biz_type", "status", "records");
  for (const idem::RecordCount& c : s.counts)
    out += fmt::format("{:<24}{:<18}{:>12}\n", c.biz_type, idem::to_string(c.status), c.records);
  out += fmt::format("{:<42}{:>12}\n\n", "total", s.total());
  out += fmt::format("purge backlog     {} expired record(s) the purge would delete now\n",
                     s.purge_backlog);
  out += fmt::format("stale claims      {}{}\n", s.stale_claims,
                     s.oldest_stale_lease
                         ? ", the oldest lease ran out at " + when(*s.oldest_stale_lease, s.now)
                         : std::string());
  out += fmt::format("table size        {}\n",
                     s.table_bytes ? bytes(*s.table_bytes) + " (records and indexes)" : "unknown");
  out += fmt::format("counted at        {} (the store's clock)\n", utc(s.now));
  return out;
}

inline nlohmann::json json(const idem::RecordStats& s) {
  const auto ms = [](idem::TimePoint t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  nlohmann::json counts = nlohmann::json::array();
  for (const idem::RecordCount& c : s.counts) {
    counts.push_back(
        {{"biz_type", c.biz_type}, {"status", idem::to_string(c.status)}, {"records", c.records}});
  }
  return {{"counts", counts},
          {"total", s.total()},
          {"purge_backlog", s.purge_backlog},
          {"stale_claims", s.stale_claims},
          {"oldest_stale_lease", s.oldest_stale_lease
                                     ? nlohmann::json{{"utc", utc(*s.oldest_stale_lease)},
                                                      {"unix_ms", ms(*s.oldest_stale_lease)}}
                                     : nlohmann::json()},
          {"table_bytes", s.table_bytes ? nlohmann::json(*s.table_bytes) : nlohmann::json()},
          {"now", {{"utc", utc(s.now)}, {"unix_ms", ms(s.now)}}}};
}

// "layout 2 (stamped; idem of layout 2 or later may use it)", or, for a table of an idem
// before stamps (its layout read from its columns, or a Redis prefix of hashes), how to stamp it.
inline std::string text(const idem::TableLayout& t) {
  if (!t.stamped)
    return fmt::format(
        "layout {}, not stamped (an idem before stamps made it; `idem schema migrate` "
        "stamps it)",
        t.layout);
  return fmt::format("layout {} (stamped; an idem of layout {} or later may use it)", t.layout,
                     t.oldest_reader);
}

}  // namespace idem_admin
