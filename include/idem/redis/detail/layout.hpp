#pragma once
// Where idem::redis keeps a record and its indexes (docs/redis.md, "Layout").
//
// Records are spread over `buckets` buckets by a hash of the key; everything of one bucket
// carries the same hash tag, so that it lies in one cluster slot and one script may touch a
// record and its bucket's indexes together:
//
//   <prefix>:{<bucket>}:r:<biz_type>:<id>   the record (fields: record_fields), packed in
//                                           one string or a hash (see "Layouts" below)
//   <prefix>:{<bucket>}:leases              sorted set of the bucket's processing records,
//                                           scored by lease_until (release_stale reads it)
//   <prefix>:{<bucket>}:expiry              sorted set of the bucket's records that may
//                                           expire (all but outcome_unknown ones), scored by
//                                           expire_at (purge_expired reads it)
//   <prefix>:{<bucket>}:unknown             sorted set of the bucket's outcome_unknown
//                                           records, scored by updated_at (list reads it)
//   <prefix>:{<bucket>}:layout              the bucket's layout stamp (idem/table_layout.hpp's
//                                           text), absent before `ensure_schema()` stamps it
//
// Layouts. Layout 1 (the first idem with Redis; no stamp) keeps each record as a hash. Layout 2
// packs it in one string (cmsgpack), far less memory once a response is longer
// than a hash keeps compact; an idem of layout 1 cannot read it (WRONGTYPE). Every idem of
// layout 2 reads both, and writes a bucket's records packed once the bucket is stamped (and a
// record that already is packed): stamping is the migration, run when no process of layout 1
// is left. Hashes left from before turn packed when next written, or expire.
//
// An index member is "<biz_type>:<id>": biz_type has no ':', so the member names one key.
// The id is stored byte for byte (hash tags stop at the first '}', which the prefix and the
// bucket number come before).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/table_layout.hpp"

namespace idem::redis::detail {

// The layout this idem writes once a bucket is stamped with it (see "Layouts" above).
inline constexpr TableLayout record_layout{.layout = 2, .oldest_reader = 2, .stamped = true};

// The record's fields, in the order the scripts answer and pack them.
// Times are milliseconds since the Unix epoch (UTC), by the server's clock; status is
// to_string(Status); retryable is 0 or 1. The last three (recovery points, repair reason,
// repaired_at) may be missing or empty: none (records written before they existed lack them).
inline constexpr std::array<std::string_view, 14> record_fields = {
    "status",    "fence",           "owner",         "fingerprint", "snapshot",
    "retryable", "attempts",        "created_at",    "updated_at",  "lease_until",
    "expire_at", "recovery_points", "repair_reason", "repaired_at"};
// How many of record_fields every record has.
inline constexpr std::size_t required_fields = 11;
// The fields a repair writes: those repaired() may change (the recovery points stay).
inline constexpr std::array<std::string_view, 9> repaired_fields = {
    "status",     "fence",     "owner",         "snapshot",   "retryable",
    "updated_at", "expire_at", "repair_reason", "repaired_at"};

constexpr std::size_t field_index(std::string_view field) noexcept {
  std::size_t i = 0;
  while (i < record_fields.size() && record_fields[i] != field)
    ++i;
  return i;
}
static_assert([] {
  for (const std::string_view f : repaired_fields)
    if (field_index(f) == record_fields.size()) return false;
  return true;
}());

// The bucket of a key: FNV-1a (32 bits) of "<biz_type>:<id>", modulo the bucket count.
// Part of the layout: every process sharing a prefix must agree on it.
inline std::uint32_t bucket_of(std::string_view member, std::uint32_t buckets) noexcept {
  std::uint32_t h = 2166136261u;
  for (const char c : member) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h % buckets;
}

// The keys one script about one record touches (all in the bucket's slot), in the order the
// writing scripts take them.
struct RecordKeys {
  std::string record;
  std::string leases;
  std::string expiry;
  std::string unknown;
  std::string layout;

  std::vector<std::string_view> all() const { return {record, leases, expiry, unknown, layout}; }
};

class Layout {
 public:
  Layout(std::string prefix, std::uint32_t buckets)
      : prefix_(std::move(prefix)), buckets_(buckets) {}

  static std::string member(const Key& key) {
    std::string m;
    m.reserve(key.biz_type().size() + 1 + key.id().size());
    m.append(key.biz_type()).append(1, ':').append(key.id());
    return m;
  }

  // The key an index member names; CorruptRecord when it names none.
  static Key key_of(std::string_view member) {
    const auto colon = member.find(':');
    if (colon == std::string_view::npos) {
      throw CorruptRecord(fmt::format("idem::redis: the index member \"{}\" names no key",
                                      idem::detail::printable(member)));
    }
    try {
      return Key{std::string(member.substr(0, colon)), std::string(member.substr(colon + 1))};
    } catch (const InvalidArgument& e) {
      throw CorruptRecord(fmt::format("idem::redis: the index member \"{}\" names no key: {}",
                                      idem::detail::printable(member), e.what()));
    }
  }

  std::uint32_t bucket(std::string_view member) const noexcept {
    return bucket_of(member, buckets_);
  }
  std::uint32_t buckets() const noexcept { return buckets_; }

  RecordKeys keys(std::string_view member) const { return keys(bucket(member), member); }
  RecordKeys keys(std::uint32_t bucket, std::string_view member) const {
    const std::string tag = fmt::format("{}:{{{}}}:", prefix_, bucket);
    std::string record;
    record.reserve(tag.size() + 2 + member.size());
    record.append(tag).append("r:").append(member);
    return {std::move(record), tag + "leases", tag + "expiry", tag + "unknown", tag + "layout"};
  }
  std::string leases(std::uint32_t bucket) const {
    return fmt::format("{}:{{{}}}:leases", prefix_, bucket);
  }
  std::string expiry(std::uint32_t bucket) const {
    return fmt::format("{}:{{{}}}:expiry", prefix_, bucket);
  }
  std::string unknown(std::uint32_t bucket) const {
    return fmt::format("{}:{{{}}}:unknown", prefix_, bucket);
  }
  std::string layout(std::uint32_t bucket) const {
    return fmt::format("{}:{{{}}}:layout", prefix_, bucket);
  }
  const std::string& prefix() const noexcept { return prefix_; }

 private:
  std::string prefix_;
  std::uint32_t buckets_;
};

}  // namespace idem::redis::detail
