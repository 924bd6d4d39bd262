#pragma once
// The rules of an idempotency record, without I/O: the decision table and every transition
// (claim, takeover, complete, fail, release, expiry) as pure functions of a Record, the
// request and `now`. Every store takes its verdicts and the values it writes from here; an
// SQL store may also guard its statement in SQL, with each guard named after the function
// below that it re-checks on the server (see idem/backend/sql_guards.hpp).
// tests/backend/record_rules_test.cpp pins each rule.
//
// The decision table (what a claim does when a record for the key already exists) is decide()
// below; docs/design.md, "The decision table", writes it out row by row with the reasons.

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/repair.hpp"
#include "idem/status.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::backend {

enum class Decision {
  take_over_expired,  // the old record no longer counts: start afresh with this request
  take_over_retry,    // the previous attempt failed retryably (or was released)
  take_over_stale,    // the previous attempt's worker died mid-flight: its lease ran out
  replay,             // answer with the stored result (success or permanent failure)
  in_progress,        // a live claim holds the key
  conflict,           // same key, different request
  outcome_unknown,    // an earlier attempt's effect may or may not have happened
};

constexpr std::string_view to_string(Decision d) noexcept {
  switch (d) {
    case Decision::take_over_expired:
      return "take_over_expired";
    case Decision::take_over_retry:
      return "take_over_retry";
    case Decision::take_over_stale:
      return "take_over_stale";
    case Decision::replay:
      return "replay";
    case Decision::in_progress:
      return "in_progress";
    case Decision::conflict:
      return "conflict";
    case Decision::outcome_unknown:
      return "outcome_unknown";
  }
  return "unknown";
}

// Fingerprints are compared only when both sides have one: an empty fingerprint means the
// caller opted out of payload checks.
constexpr bool fingerprints_match(std::string_view stored, std::string_view request) noexcept {
  return stored.empty() || request.empty() || stored == request;
}

// Past expire_at a record no longer counts: a claim starts afresh and purge_expired may
// delete it. An outcome_unknown record never expires: forgetting it would let the business
// run again on top of an effect that may have happened.
constexpr bool is_expired(const Record& r, TimePoint now) noexcept {
  return r.expire_at <= now && r.status != Status::outcome_unknown;
}

// A processing record whose worker's lease ran out (the worker is presumed dead), not yet
// expired: release_stale() may fail it retryably, a claim may take it over.
constexpr bool is_stale(const Record& r, TimePoint now) noexcept {
  return r.status == Status::processing && r.lease_until <= now && !is_expired(r, now);
}

// A live record a new attempt may take over: stale, or failed retryably.
constexpr bool is_retry_due(const Record& r, TimePoint now) noexcept {
  return is_stale(r, now) || (r.status == Status::failed && r.retryable && !is_expired(r, now));
}

inline Decision decide(const Record& stored, std::string_view fingerprint, TimePoint now) noexcept {
  if (is_expired(stored, now)) return Decision::take_over_expired;
  if (!fingerprints_match(stored.fingerprint, fingerprint)) return Decision::conflict;
  if (is_stale(stored, now)) return Decision::take_over_stale;
  if (is_retry_due(stored, now)) return Decision::take_over_retry;
  if (stored.status == Status::outcome_unknown) return Decision::outcome_unknown;
  return stored.status == Status::processing ? Decision::in_progress : Decision::replay;
}

constexpr bool is_takeover(Decision d) noexcept {
  return d == Decision::take_over_expired || d == Decision::take_over_retry ||
         d == Decision::take_over_stale;
}

// The verdict a claim answers with once its decision held (a takeover acquires).
constexpr Verdict verdict_of(Decision d) noexcept {
  switch (d) {
    case Decision::take_over_expired:
    case Decision::take_over_retry:
    case Decision::take_over_stale:
      return Verdict::acquired;
    case Decision::replay:
      return Verdict::replayed;
    case Decision::in_progress:
      return Verdict::in_progress;
    case Decision::conflict:
      return Verdict::conflict;
    case Decision::outcome_unknown:
      return Verdict::outcome_unknown;
  }
  return Verdict::in_progress;
}

// Whether a takeover decided on an earlier read may still be written at `now`: the guard of
// a takeover's write (the ticket read must also still be the stored one).
constexpr bool takeover_holds(const Record& r, Decision d, TimePoint now) noexcept {
  return d == Decision::take_over_expired ? is_expired(r, now) : is_retry_due(r, now);
}

// The record a fresh claim writes: processing, fence 1, the first attempt, no snapshot yet,
// updated when created.
inline Record claim_record(Key key, std::string owner, std::string_view fingerprint,
                           TimePoint created, TimePoint lease_until, TimePoint expire_at) {
  return Record{.key = std::move(key),
                .status = Status::processing,
                .ticket = Ticket{1, std::move(owner)},
                .fingerprint = std::string(fingerprint),
                .snapshot = {},
                .retryable = false,
                .attempts = 1,
                .created_at = created,
                .updated_at = created,
                .lease_until = lease_until,
                .expire_at = expire_at,
                .recovery_points = {},
                .repair_reason = {},
                .repaired_at = std::nullopt};
}

inline Record claim_record(Key key, std::string owner, std::string_view fingerprint, TimePoint now,
                           const Options& o) {
  return claim_record(std::move(key), std::move(owner), fingerprint, now, now + o.lease,
                      now + o.ttl);
}

// The record a takeover writes over `stored`. take_over_retry and take_over_stale keep the
// stored fingerprint unless it was empty, the recovery points of the finished steps and the
// last repair; take_over_expired replaces everything with this request's. All push expire_at
// to now + ttl, so a renewed attempt can never expire under its own lease.
inline Record take_over(const Record& stored, Decision d, std::string_view fingerprint,
                        std::string owner, TimePoint now, const Options& o) {
  Record r = stored;
  if (d == Decision::take_over_expired) {
    r.fingerprint = std::string(fingerprint);
    r.attempts = 1;
    r.created_at = now;
    r.recovery_points.clear();
    r.repair_reason.clear();
    r.repaired_at.reset();
  } else {
    if (r.fingerprint.empty()) r.fingerprint = std::string(fingerprint);
    r.attempts += 1;
  }
  r.status = Status::processing;
  r.ticket = Ticket{stored.ticket.fence + 1, std::move(owner)};
  r.snapshot.clear();
  r.retryable = false;
  r.updated_at = now;
  r.lease_until = now + o.lease;
  r.expire_at = now + o.ttl;
  return r;
}

// Whether the holder of `t` may still complete or fail the record: it is processing under
// that very claim (fence and owner). Anything else is LeaseLost, and nothing is written.
inline bool holds(const Record& r, const Ticket& t) noexcept {
  return r.status == Status::processing && r.ticket == t;
}

// Whether `stored` is a claim made with the owner token `token` that nobody finished: what a
// claim cut off by a cancellation, or a batch that failed midway, leaves behind and releases.
inline bool unfinished_claim_of(const std::optional<Record>& stored,
                                std::string_view token) noexcept {
  return stored && stored->status == Status::processing && stored->ticket.owner == token;
}

// Only a failure carries the retryable flag; a success never runs again.
constexpr bool stored_retryable(Status to, bool retryable) noexcept {
  return to == Status::failed && retryable;
}

// The record complete() (to = succeeded) or fail() (to = failed) writes over a held claim.
inline Record finished(const Record& held, Status to, std::string_view snapshot, bool retryable,
                       TimePoint now) {
  Record r = held;
  r.status = to;
  r.snapshot = std::string(snapshot);
  r.retryable = stored_retryable(to, retryable);
  r.updated_at = now;
  return r;
}

// Whether `r` already holds what finished() would write for `t` (the write of an earlier try
// whose reply was lost with its connection).
inline bool finished_as(const Record& r, const Ticket& t, Status to, std::string_view snapshot,
                        bool retryable) noexcept {
  return r.ticket == t && r.status == to && r.snapshot == snapshot &&
         r.retryable == stored_retryable(to, retryable);
}

// What release_stale() writes over a stale record: a retryable failure, so that the next
// duplicate runs again; the stale worker's later complete or fail no longer holds().
inline constexpr Status released_status = Status::failed;
inline constexpr bool released_retryable = true;
inline constexpr std::string_view released_snapshot =
    R"({"error":"idem.lease_expired","detail":"released by release_stale"})";

inline Record released(const Record& stale, TimePoint now) {
  return finished(stale, released_status, released_snapshot, released_retryable, now);
}

// Whether a claim's takeover resumes an attempt whose worker died mid-flight (its effects
// outside the store may have happened): ClaimResult::after_crash.
constexpr bool resumes_crashed(Decision d) noexcept {
  return d == Decision::take_over_stale;
}

// Whether a repair decided by someone who read fence `fence` may still be written over `r`.
inline bool repair_holds(const Record& r, std::uint64_t fence) noexcept {
  return r.ticket.fence == fence;
}

// What a release by repair stores as the error; the reason is kept in repair_reason.
inline constexpr std::string_view repair_released_snapshot =
    R"({"error":"idem.released","detail":"released by a repair: the business may run again"})";
inline constexpr std::string_view repair_failed_snapshot =
    R"({"error":"idem.repaired","detail":"failed by a repair"})";
inline constexpr std::string_view repair_unknown_snapshot =
    R"({"error":"idem.outcome_unknown","detail":"marked by a repair"})";

// The record repair() writes over `stored` (a validated Repair whose fence holds): the new
// status and snapshot, fence + 1 with the repairer's owner token (so the crashed worker's
// complete or fail no longer holds, and a repair whose reply was lost recognises its own
// write), the reason and time, and an expire_at never shortened. Finished steps stay.
inline Record repaired(const Record& stored, const Repair& repair, std::string owner,
                       TimePoint now) {
  Record r = stored;
  auto snapshot_or = [&](std::string_view note) {
    return repair.snapshot.empty() ? std::string(note) : repair.snapshot;
  };
  switch (repair.action) {
    case RepairAction::complete:
      r.status = Status::succeeded;
      r.snapshot = repair.snapshot;
      r.retryable = false;
      break;
    case RepairAction::fail:
      r.status = Status::failed;
      r.snapshot = snapshot_or(repair_failed_snapshot);
      r.retryable = repair.retryable;
      break;
    case RepairAction::release:
      r.status = Status::failed;
      r.snapshot = std::string(repair_released_snapshot);
      r.retryable = true;
      break;
    case RepairAction::mark_unknown:
      r.status = Status::outcome_unknown;
      r.snapshot = snapshot_or(repair_unknown_snapshot);
      r.retryable = false;
      break;
  }
  r.ticket = Ticket{stored.ticket.fence + 1, std::move(owner)};
  r.updated_at = now;
  r.repaired_at = now;
  r.repair_reason = repair.reason;
  r.expire_at = std::max(stored.expire_at, now + repair.keep);
  return r;
}

// The RepairRefused a store throws when repair_holds() is false (or there is no record).
inline RepairRefused repair_refused(std::string_view who, const Key& key, std::uint64_t fence,
                                    std::optional<Record> current) {
  const std::string now = current ? fmt::format("it is now {} with fence {}",
                                                to_string(current->status), current->ticket.fence)
                                  : std::string("there is no record");
  return RepairRefused(fmt::format("{}: the repair of {}/{} was read at fence {}, but {}; nothing "
                                   "was changed",
                                   who, key.biz_type(), detail::printable(key.id()), fence, now),
                       std::move(current));
}

// A read answers the record of the key asked for, byte for byte. A key column that compares
// case- or accent-insensitively (a _ci collation set by hand, SQLite's NOCASE) hands back
// another key's row, whose response must never be replayed as this key's: the store throws
// this CorruptRecord instead. `who` names the store.
inline void require_key_read(std::string_view who, const Key& asked, const Record& read) {
  if (read.key == asked) return;
  throw CorruptRecord(fmt::format(
      "{}: reading {}/{} answered the record of {}/{}: the key columns do not compare byte for "
      "byte (a case-insensitive collation?); make them binary again (see docs/schema.sql)",
      who, detail::printable(asked.biz_type()), detail::printable(asked.id()),
      detail::printable(read.key.biz_type()), detail::printable(read.key.id())));
}

// The LeaseLost a store throws when a complete or fail does not hold(); `who` names the store.
inline LeaseLost lease_lost(std::string_view who, const Key& key, const Ticket& t) {
  return LeaseLost(
      fmt::format("{}: the claim on {}/{} (fence {}) is no longer held; the record was taken "
                  "over, released or purged",
                  who, key.biz_type(), detail::printable(key.id()), t.fence));
}

// In-memory counting and filtering, for a store that counts (stats) or lists (list) its
// records in memory; an SQL store says the same in its queries.

// Whether `r` answers `q` at `now` (a store that filters in memory applies this; an SQL store
// says the same in its WHERE clause).
inline bool matches(const RecordQuery& q, const Record& r, TimePoint now) {
  if (q.stale && !is_stale(r, now)) return false;
  if (q.status && r.status != *q.status) return false;
  if (!q.biz_type.empty() && r.key.biz_type() != q.biz_type) return false;
  if (q.not_updated_for && r.updated_at > now - *q.not_updated_for) return false;
  return true;
}

// The order list() answers in: stale claims by lease, everything else by last update.
inline bool listed_before(const RecordQuery& q, const Record& a, const Record& b) {
  return q.stale ? a.lease_until < b.lease_until : a.updated_at < b.updated_at;
}

// Adds `r` to `stats` as judged at stats.now (a store that counts in memory applies this; an
// SQL store says the same in its queries). Keeps `counts` ordered by biz_type, then status.
inline void tally(RecordStats& stats, const Record& r) {
  auto at = stats.counts.begin();
  while (at != stats.counts.end() && (at->biz_type < r.key.biz_type() ||
                                      (at->biz_type == r.key.biz_type() && at->status < r.status)))
    ++at;
  if (at != stats.counts.end() && at->biz_type == r.key.biz_type() && at->status == r.status) {
    ++at->records;
  } else {
    stats.counts.insert(
        at, RecordCount{.biz_type = r.key.biz_type(), .status = r.status, .records = 1});
  }
  if (is_expired(r, stats.now)) ++stats.purge_backlog;
  if (is_stale(r, stats.now)) {
    ++stats.stale_claims;
    if (!stats.oldest_stale_lease || r.lease_until < *stats.oldest_stale_lease)
      stats.oldest_stale_lease = r.lease_until;
  }
}

}  // namespace idem::backend
