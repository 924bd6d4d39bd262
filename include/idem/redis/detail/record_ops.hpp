#pragma once
// The record operations of idem::redis::Store on one connection, and the Backend that hands them
// to the store skeleton (idem/backend/store_skeleton.hpp) and the bound store
// (idem/same_transaction/bound_sql_store.hpp).

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/record_rules.hpp"
#include "idem/backend/store_skeleton.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/redis/connection.hpp"
#include "idem/redis/detail/layout.hpp"
#include "idem/redis/detail/record_scripts.hpp"
#include "idem/redis/errors.hpp"
#include "idem/redis/pool.hpp"
#include "idem/redis/reply.hpp"
#include "idem/redis/store_params.hpp"
#include "idem/retry_policy.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/table_layout.hpp"
#include "idem/ticket.hpp"

namespace idem::redis {

namespace detail {

inline std::string decimal(std::int64_t v) {
  return fmt::format_int(v).str();
}

// The record a script answered with (its fields in record_fields' order).
inline Record decode_record(const Key& key, ReplyView fields) {
  if (fields.size() != record_fields.size()) {
    throw CorruptRecord(fmt::format("idem::redis: the record {}/{} has {} fields, not {}",
                                    key.biz_type(), idem::detail::printable(key.id()),
                                    fields.size(), record_fields.size()));
  }
  auto text = [&](std::size_t i) -> std::string_view {
    const ReplyView v = fields[i];
    if (v.is_nil()) {
      if (i >= required_fields) return {};  // an optional field: none
      throw CorruptRecord(fmt::format("idem::redis: the record {}/{} has no field {}",
                                      key.biz_type(), idem::detail::printable(key.id()),
                                      record_fields[i]));
    }
    return v.text();
  };
  auto number = [&](std::size_t i) -> std::int64_t {
    const std::string_view s = text(i);
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v < 0) {
      throw CorruptRecord(
          fmt::format("idem::redis: the record {}/{} has {} = \"{}\", not a "
                      "count or a time",
                      key.biz_type(), idem::detail::printable(key.id()), record_fields[i],
                      idem::detail::printable(s)));
    }
    return v;
  };
  auto time = [&](std::size_t i) { return TimePoint{Duration{number(i)}}; };

  const std::string_view name = text(0);
  std::optional<Status> status;
  for (const Status s :
       {Status::processing, Status::succeeded, Status::failed, Status::outcome_unknown}) {
    if (name == to_string(s)) status = s;
  }
  if (!status) {
    throw CorruptRecord(fmt::format("idem::redis: the record {}/{} has status \"{}\"",
                                    key.biz_type(), idem::detail::printable(key.id()),
                                    idem::detail::printable(name)));
  }
  std::optional<TimePoint> repaired_at;
  if (!text(13).empty()) repaired_at = time(13);
  return Record{.key = key,
                .status = *status,
                .ticket = Ticket{static_cast<std::uint64_t>(number(1)), std::string(text(2))},
                .fingerprint = std::string(text(3)),
                .snapshot = std::string(text(4)),
                .retryable = number(5) != 0,
                .attempts = static_cast<std::uint32_t>(number(6)),
                .created_at = time(7),
                .updated_at = time(8),
                .lease_until = time(9),
                .expire_at = time(10),
                .recovery_points = std::string(text(11)),
                .repair_reason = std::string(text(12)),
                .repaired_at = repaired_at};
}

// One script call of a record operation with the strings its views point into: the record's
// keys and the arguments made for it. They live on the heap, so that the request can move
// (from RecordOps to a connection, into a coroutine frame) without its views dangling.
class ScriptRequest {
 public:
  // A call of `script` with the record's `keys`, all five, as every write script takes them.
  ScriptRequest(const Script& script, RecordKeys keys)
      : script_(&script), held_(std::make_unique<Held>()) {
    held_->keys = std::move(keys);
    held_->call.keys = held_->keys.all();
  }

  // A call of `script` with one key of its own.
  ScriptRequest(const Script& script, std::string key)
      : script_(&script), held_(std::make_unique<Held>()) {
    held_->call.keys = {hold(std::move(key))};
  }

  // Keeps `value` for the call's lifetime; answers a view of it for the call's arguments.
  std::string_view hold(std::string value) {
    held_->strings.push_back(std::move(value));
    return held_->strings.back();
  }

  const Script& script() const noexcept { return *script_; }
  const ScriptCall& call() const noexcept { return held_->call; }
  ScriptCall& call() noexcept { return held_->call; }

 private:
  struct Held {
    RecordKeys keys;
    std::deque<std::string> strings;  // a deque: earlier strings stay where they are
    ScriptCall call;
  };
  const Script* script_;
  std::unique_ptr<Held> held_;
};

// The record operations (see idem/backend/store_skeleton.hpp), one script each.
class RecordOps {
 public:
  static constexpr std::string_view name = "idem::redis";

  RecordOps(Layout layout, std::chrono::milliseconds keep_expired)
      : layout_(std::move(layout)),
        keep_(decimal(keep_expired.count())),
        scripts_(make_record_scripts()) {}

  // Each operation below is a script call made here (a ScriptRequest), sent by a connection
  // (redis::Connection, or the coroutine AsyncConnection: idem/redis/async_store.hpp), and its
  // reply read here: the keys, arguments and decoding exist once for both.

  ScriptRequest claim_request(const Key& key, std::string_view fp, const Options& o,
                              const std::string& token) const {
    ScriptRequest q(scripts_.claim, layout_.keys(Layout::member(key)));
    const std::string_view member = q.hold(Layout::member(key));
    q.call().args = {token, fp,    q.hold(decimal(o.lease.count())), q.hold(decimal(o.ttl.count())),
                     keep_, member};
    return q;
  }
  backend::InsertOrRead claim_answer(const Key& key, std::string_view fp, const Options& o,
                                     const std::string& token, const Reply& r) const {
    const TimePoint now{Duration{r[1].integer()}};
    if (r[0].integer() == 1) return {backend::claim_record(key, token, fp, now, o), std::nullopt};
    return {std::nullopt, backend::RecordRead{decode_record(key, r[2]), now}};
  }
  backend::InsertOrRead insert_or_read(Connection& c, const Key& key, std::string_view fp,
                                       const Options& o, const std::string& token) const {
    const ScriptRequest q = claim_request(key, fp, o, token);
    return claim_answer(key, fp, o, token, c.eval(q.script(), q.call()));
  }

  // A batch's distinct keys (idem/backend/batch_plan.hpp) are claimed by one pipeline of claim
  // scripts, one per node, and each answer is then settled as claim() settles it (a takeover
  // is one more call).
  static constexpr std::size_t max_batch_rows = 128;
  std::vector<ScriptRequest> claim_requests(std::span<const ClaimRequest* const> requests,
                                            std::span<const std::string> tokens,
                                            const Options& o) const {
    std::vector<ScriptRequest> out;
    out.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i)
      out.push_back(claim_request(requests[i]->key, requests[i]->fingerprint, o, tokens[i]));
    return out;
  }
  // What each claim script of a chunk met, in request order, as settle_batch takes it.
  std::vector<std::optional<backend::InsertOrRead>> claim_answers(
      std::span<const ClaimRequest* const> requests, std::span<const std::string> tokens,
      const Options& o, const std::vector<Reply>& replies) const {
    std::vector<std::optional<backend::InsertOrRead>> out;
    out.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i)
      out.emplace_back(
          claim_answer(requests[i]->key, requests[i]->fingerprint, o, tokens[i], replies[i]));
    return out;
  }
  std::vector<ClaimResult> claim_chunk(Connection& c, std::span<const ClaimRequest* const> requests,
                                       std::span<const std::string> tokens,
                                       const Options& o) const {
    const std::vector<ScriptRequest> claims = claim_requests(requests, tokens, o);
    auto answers = claim_answers(requests, tokens, o, c.eval_all(scripts_.claim, calls(claims)));
    return backend::settle_batch(name, *this, c, requests, tokens, o, answers);
  }

  ScriptRequest read_request(const Key& key) const {
    ScriptRequest q(scripts_.read, layout_.keys(Layout::member(key)));
    q.call().keys.resize(1);  // the record's key alone
    return q;
  }
  std::optional<backend::RecordRead> read_answer(const Key& key, const Reply& r) const {
    if (r.size() < 2) return std::nullopt;
    return backend::RecordRead{decode_record(key, r[1]), TimePoint{Duration{r[0].integer()}}};
  }
  std::optional<backend::RecordRead> read(Connection& c, const Key& key, bool) const {
    const ScriptRequest q = read_request(key);
    return read_answer(key, c.eval(q.script(), q.call()));
  }

  // A retry or stale takeover keeps the recovery points read (take_over()), so next's points
  // are those read, and the script is guarded by them too.
  ScriptRequest takeover_request(backend::Decision d, const Record& next,
                                 const Ticket& read) const {
    ScriptRequest q(scripts_.take_over, layout_.keys(Layout::member(next.key)));
    const std::string_view member = q.hold(Layout::member(next.key));
    q.call().args = {d == backend::Decision::take_over_expired ? "expired" : "retry",
                     q.hold(decimal(static_cast<std::int64_t>(read.fence))),
                     read.owner,
                     next.recovery_points,
                     keep_,
                     member};
    for (std::string& value : encode(next))
      q.call().args.push_back(q.hold(std::move(value)));
    return q;
  }
  bool write_takeover(Connection& c, backend::Decision d, const Record& next,
                      const Ticket& read) const {
    const ScriptRequest q = takeover_request(d, next, read);
    return written(c.eval(q.script(), q.call()));
  }

  // Writes what repaired() computed from the record read (idem/backend/steps.hpp, RepairSteps),
  // guarded by the ticket read; the indexes and the key's expiry follow the new status.
  ScriptRequest repair_request(const Record& next, const Ticket& read) const {
    ScriptRequest q(scripts_.repair, layout_.keys(Layout::member(next.key)));
    const std::string_view member = q.hold(Layout::member(next.key));
    std::array<std::string, record_fields.size()> values = encode(next);
    q.call().args = {q.hold(decimal(static_cast<std::int64_t>(read.fence))), read.owner, keep_,
                     member};
    for (const std::string_view field : repaired_fields) {
      q.call().args.push_back(field);
      q.call().args.push_back(q.hold(std::move(values[field_index(field)])));
    }
    return q;
  }
  bool write_repair(Connection& c, const Record& next, const Ticket& read) const {
    const ScriptRequest q = repair_request(next, read);
    return written(c.eval(q.script(), q.call()));
  }

  // The recovery points computed from those read (StepSteps), guarded by holds() and by the
  // points read.
  ScriptRequest points_request(const Key& key, const Ticket& t, std::string_view before,
                               std::string_view after) const {
    ScriptRequest q(scripts_.points, layout_.keys(Layout::member(key)));
    q.call().args = {q.hold(decimal(static_cast<std::int64_t>(t.fence))), t.owner, before, after};
    return q;
  }
  bool write_points(Connection& c, const Key& key, const Ticket& t, std::string_view before,
                    std::string_view after) const {
    const ScriptRequest q = points_request(key, t, before, after);
    const auto start = std::chrono::steady_clock::now();
    const bool won = written(c.eval(q.script(), q.call()));
    const auto pause = points_backoff(won, std::chrono::steady_clock::now() - start);
    if (pause > std::chrono::nanoseconds::zero()) std::this_thread::sleep_for(pause);
    return won;
  }

  // Callers that write steps of one claim at once and lose a round meet again in the same
  // order (the winner's next write arrives first, round after round), so a loser waits a
  // random part of a few round trips (`took`) before it reads again, twice as many after each
  // round it lost in a row (capped): a crowd of writers spreads out instead of colliding until
  // a caller runs out of rounds. Zero after a round won.
  static std::chrono::nanoseconds points_backoff(bool won, std::chrono::nanoseconds took) {
    thread_local int lost_in_a_row = 0;
    if (won) {
      lost_in_a_row = 0;
      return std::chrono::nanoseconds::zero();
    }
    thread_local std::minstd_rand jitter{std::random_device{}()};
    lost_in_a_row = std::min(lost_in_a_row + 1, 6);
    const int spread = 100 << lost_in_a_row;  // in hundredths of the round trip
    return took * std::uniform_int_distribution<int>(0, spread)(jitter) / 100;
  }

  // What a guarded write script answers: 1 written, 0 refused (the guard did not hold).
  static bool written(const Reply& r) { return r.integer() == 1; }

  // The layout of the prefix's records, from every bucket's layout key (pipelined reads):
  // stamped when every bucket is, else layout 1 (a bucket without a stamp holds hashes).
  // Throws SchemaMismatch when a bucket holds a layout this idem must not write, or a key that
  // is not a stamp.
  TableLayout layout_of(Connection& c) const {
    const std::vector<ScriptRequest> reads = layout_requests();
    return layout_answer(c.eval_all(scripts_.get, calls(reads)));
  }
  std::vector<ScriptRequest> layout_requests() const {
    std::vector<ScriptRequest> reads;
    for (std::string& k : layout_keys())
      reads.emplace_back(scripts_.get, std::move(k));
    return reads;
  }
  TableLayout layout_answer(const std::vector<Reply>& stamps) const {
    const std::vector<std::string> keys = layout_keys();
    std::optional<TableLayout> oldest;
    std::size_t stamped = 0;
    for (std::size_t b = 0; b < stamps.size(); ++b) {
      if (stamps[b].is_nil()) continue;
      const auto stamp = idem::detail::parse_layout_stamp(stamps[b].text());
      if (!stamp) {
        throw SchemaMismatch(schema_name(),
                             {{fmt::format("the key {} holds \"{}\", not a layout stamp", keys[b],
                                           idem::detail::printable(stamps[b].text())),
                               fmt::format("delete the key (its bucket then writes layout 1) and "
                                           "run `idem schema migrate`")}});
      }
      if (auto problem = idem::detail::layout_problem(*stamp, record_layout.layout))
        throw SchemaMismatch(schema_name(), {std::move(*problem)});
      if (!oldest || stamp->layout < oldest->layout) oldest = stamp;
      ++stamped;
    }
    if (stamped < keys.size()) return {.layout = 1, .oldest_reader = 1, .stamped = false};
    return *oldest;
  }

  // Stamps every bucket that has no stamp with record_layout (never over a stamp there);
  // answers how many it stamped.
  std::size_t stamp_layout(Connection& c) const {
    layout_of(c);  // refuses a newer idem's layout first
    const std::vector<ScriptRequest> stamps = stamp_requests();
    return changed(c.eval_all(scripts_.stamp, calls(stamps)));
  }
  std::vector<ScriptRequest> stamp_requests() const {
    const std::string stamp = idem::detail::layout_stamp(record_layout);
    std::vector<ScriptRequest> stamps;
    for (std::string& k : layout_keys()) {
      stamps.emplace_back(scripts_.stamp, std::move(k));
      stamps.back().call().args = {stamps.back().hold(stamp)};
    }
    return stamps;
  }

  // "of Redis prefix idem", for SchemaMismatch's message.
  std::string schema_name() const { return "of Redis prefix " + layout_.prefix(); }

  // One list() query without I/O (defined below): the round trips it needs, one after another
  // (index pages, then the records they name), for a blocking or a coroutine connection to send.
  class ListRun;

  std::vector<Record> list(Connection& c, const RecordQuery& q) const;

  ScriptRequest finish_request(const Key& key, const Ticket& t, std::string_view snapshot,
                               Status to, bool retryable) const {
    ScriptRequest q(scripts_.finish, layout_.keys(Layout::member(key)));
    const std::string_view member = q.hold(Layout::member(key));
    q.call().args = {
        q.hold(decimal(static_cast<std::int64_t>(t.fence))),  t.owner, to_string(to), snapshot,
        backend::stored_retryable(to, retryable) ? "1" : "0", member};
    return q;
  }
  bool finish(Connection& c, const Key& key, const Ticket& t, std::string_view snapshot, Status to,
              bool retryable) const {
    const ScriptRequest q = finish_request(key, t, snapshot, to, retryable);
    return written(c.eval(q.script(), q.call()));
  }

  // One batch of purge or release: the due members of every bucket's index (a few per
  // bucket, pipelined: due_requests()), then the guarded script on at most `batch` of them
  // (pipelined: act_requests()), with the record's keys and the sweep's arguments. Answers how
  // many records the script changed.
  struct Sweep {
    bool leases;  // the lease index (release), else the expiry index (purge)
    const Script* act;
    std::vector<std::string_view> extra;
  };
  Sweep purge_sweep() const { return {false, &scripts_.purge, {}}; }
  Sweep release_sweep() const {
    return {true,
            &scripts_.release,
            {to_string(backend::released_status), backend::released_snapshot,
             backend::released_retryable ? "1" : "0"}};
  }

  std::vector<ScriptRequest> due_requests(const Sweep& sweep, std::size_t batch) const {
    const std::uint32_t buckets = layout_.buckets();
    // Records spread evenly over the buckets: twice the even share, so that one batch finds
    // `batch` due members unless fewer are due.
    const std::string limit =
        decimal(static_cast<std::int64_t>(std::min<std::size_t>(batch, 2 * (batch / buckets) + 2)));
    std::vector<ScriptRequest> scans;
    scans.reserve(buckets);
    for (std::uint32_t b = 0; b < buckets; ++b) {
      scans.emplace_back(scripts_.due, sweep.leases ? layout_.leases(b) : layout_.expiry(b));
      scans.back().call().args = {scans.back().hold(limit)};
    }
    return scans;
  }
  std::vector<ScriptRequest> act_requests(const Sweep& sweep, std::size_t batch,
                                          const std::vector<Reply>& due) const {
    std::vector<ScriptRequest> acts;
    for (std::uint32_t b = 0; b < due.size() && acts.size() < batch; ++b) {
      for (std::size_t i = 0; i < due[b].size() && acts.size() < batch; ++i) {
        const std::string_view member = due[b][i].text();
        acts.emplace_back(*sweep.act, layout_.keys(b, member));
        acts.back().call().args = {acts.back().hold(std::string(member))};
        acts.back().call().args.insert(acts.back().call().args.end(), sweep.extra.begin(),
                                       sweep.extra.end());
      }
    }
    return acts;
  }
  static std::size_t changed(const std::vector<Reply>& replies) {
    return static_cast<std::size_t>(std::count_if(replies.begin(), replies.end(), written));
  }
  // The calls of requests of one script, for eval_all.
  static std::vector<ScriptCall> calls(const std::vector<ScriptRequest>& requests) {
    std::vector<ScriptCall> out;
    out.reserve(requests.size());
    for (const ScriptRequest& q : requests)
      out.push_back(q.call());
    return out;
  }

  std::size_t purge(Connection& c, std::size_t batch) const {
    return sweep(c, batch, purge_sweep());
  }
  std::size_t release(Connection& c, std::size_t batch) const {
    return sweep(c, batch, release_sweep());
  }

  // Every record once: the expiry and unknown indexes walked as list() walks them (walk(); a
  // member a page repeats is counted once), each record read and tallied by
  // record_stats.hpp's rules at the server's now of the first read. table_bytes adds up what
  // MEMORY USAGE says the records and every bucket's indexes take.
  RecordStats stats(Connection& c) const {
    RecordStats stats;
    bool dated = false;
    std::uint64_t bytes = 0;
    std::vector<IndexCursor> open;
    for (std::uint32_t b = 0; b < layout_.buckets(); ++b) {
      open.push_back({b, layout_.expiry(b), "0"});
      open.push_back({b, layout_.unknown(b), "0"});
    }
    {
      std::vector<std::string> leases;  // the calls below hold views of these names
      leases.reserve(layout_.buckets());
      std::vector<ScriptCall> indexes;
      for (std::uint32_t b = 0; b < layout_.buckets(); ++b) {
        leases.push_back(layout_.leases(b));
        indexes.push_back({{leases.back(), open[2 * b].index, open[2 * b + 1].index}, {}});
      }
      for (const Reply& r : c.eval_all(scripts_.sizes, indexes))
        bytes += static_cast<std::uint64_t>(r.integer());
    }
    std::unordered_set<std::string> counted;
    std::vector<std::string> members;
    std::vector<std::string> records_keys;
    walk(
        c, std::move(open),
        [&](std::uint32_t bucket, ReplyView page) {
          for (std::size_t j = 0; j < page.size(); j += 2) {
            std::string member(page[j].text());
            if (!counted.insert(member).second) continue;
            records_keys.push_back(layout_.keys(bucket, member).record);
            members.push_back(std::move(member));
          }
        },
        [&] {
          std::vector<ScriptCall> reads;
          reads.reserve(records_keys.size());
          for (const std::string& k : records_keys)
            reads.push_back({{k}, {}});
          const std::vector<Reply> records = c.eval_all(scripts_.sized_read, reads);
          for (std::size_t i = 0; i < records.size(); ++i) {
            const Reply& r = records[i];
            if (!dated) stats.now = TimePoint{Duration{r[0].integer()}};
            dated = true;
            if (r.size() < 3) continue;  // gone since the index named it
            backend::tally(stats, decode_record(Layout::key_of(members[i]), r[1]));
            bytes += static_cast<std::uint64_t>(r[2].integer());
          }
          members.clear();
          records_keys.clear();
        });
    if (!dated) {
      // No record to read the server's clock with: read one that cannot exist (a member
      // without ':' names no key).
      const std::string nowhere = layout_.keys(0, "now").record;
      stats.now = TimePoint{Duration{c.eval(scripts_.read, {{nowhere}, {}})[0].integer()}};
    }
    stats.table_bytes = bytes;
    return stats;
  }

  const Layout& layout() const noexcept { return layout_; }
  const RecordScripts& scripts() const noexcept { return scripts_; }

 private:
  // One index of one bucket, read page by page.
  struct IndexCursor {
    std::uint32_t bucket;
    std::string index;
    // Ordered: the score the next page starts at, and how many members of exactly that score
    // were read already. A walk: ZSCAN's cursor.
    std::string from = "-inf";
    std::string skip = "0";
    std::size_t skipped = 0;
    TimePoint last{};  // ordered: the last score read
  };

  // Walks indexes by ZSCAN pages (the server's work per call is bounded however large the
  // index; a member may come twice), a few cursors per round trip (pipelined).
  class IndexWalk {
   public:
    explicit IndexWalk(std::vector<IndexCursor> open) : open_(std::move(open)) {}
    bool done() const noexcept { return open_.empty(); }
    // The round's calls (views of the walk's cursors, until answer()).
    std::vector<ScriptCall> calls() const {
      std::vector<ScriptCall> out;
      out.reserve(round());
      for (std::size_t i = 0; i < round(); ++i)
        out.push_back({{open_[i].index}, {open_[i].from, count}});
      return out;
    }
    // The round's pages, in calls()' order: each goes to on_page(bucket, page) (member,
    // score, ...).
    template <class OnPage>
    void answer(const std::vector<Reply>& pages, OnPage on_page) {
      const std::size_t n = round();
      std::vector<IndexCursor> more(
          std::make_move_iterator(open_.begin() + static_cast<std::ptrdiff_t>(n)),
          std::make_move_iterator(open_.end()));
      for (std::size_t i = 0; i < n; ++i) {
        on_page(open_[i].bucket, pages[i][1]);
        open_[i].from = std::string(pages[i][0].text());
        if (open_[i].from != "0") more.push_back(std::move(open_[i]));
      }
      open_ = std::move(more);
    }

   private:
    static constexpr std::size_t cursors_per_round = 32;
    static constexpr std::string_view count = "128";
    std::size_t round() const noexcept { return std::min(open_.size(), cursors_per_round); }
    std::vector<IndexCursor> open_;
  };

  // walk() on this connection: on_round() ends each round.
  template <class OnPage, class OnRound>
  void walk(Connection& c, std::vector<IndexCursor> open, OnPage on_page, OnRound on_round) const {
    IndexWalk w(std::move(open));
    while (!w.done()) {
      w.answer(c.eval_all(scripts_.scan, w.calls()), on_page);
      on_round();
    }
  }

  // Members named by index pages, with their record keys.
  struct Candidates {
    std::vector<std::string> members;
    std::vector<RecordKeys> keys;
  };

  // The members of a page (member, score, member, score, ...) of `bucket`'s index; those of
  // another biz_type than the query's are left out unread. Answers how many the page held.
  std::size_t take(Candidates& got, const RecordQuery& q, std::uint32_t bucket,
                   ReplyView page) const {
    const std::size_t n = page.size() / 2;
    for (std::size_t j = 0; j < n; ++j) {
      std::string member(page[2 * j].text());
      if (!q.biz_type.empty() && Layout::key_of(member).biz_type() != q.biz_type) continue;
      got.keys.push_back(layout_.keys(bucket, member));
      got.members.push_back(std::move(member));
    }
    return n;
  }

  // The reads of the candidates' records (views of `got`).
  static std::vector<ScriptCall> read_calls(const Candidates& got) {
    std::vector<ScriptCall> reads;
    reads.reserve(got.keys.size());
    for (const RecordKeys& k : got.keys)
      reads.push_back({{k.record}, {}});
    return reads;
  }

  // Keeps, in `found`, the best `limit` of those found so far that match the query, each
  // record once, given the candidates' records as read_calls() read them.
  static void keep_best(const RecordQuery& q, const Candidates& got,
                        const std::vector<Reply>& records, std::vector<Record>& found) {
    for (std::size_t i = 0; i < records.size(); ++i) {
      const Reply& r = records[i];
      if (r.size() < 2) continue;  // gone since the index named it
      Record rec = decode_record(Layout::key_of(got.members[i]), r[1]);
      if (backend::matches(q, rec, TimePoint{Duration{r[0].integer()}}))
        found.push_back(std::move(rec));
    }
    std::stable_sort(found.begin(), found.end(), [&](const Record& a, const Record& b) {
      return backend::listed_before(q, a, b);
    });
    std::unordered_set<Key> kept;
    std::vector<Record> best;
    for (Record& r : found) {
      if (best.size() == q.limit) break;
      if (kept.insert(r.key).second) best.push_back(std::move(r));
    }
    found = std::move(best);
  }

  std::vector<std::string> layout_keys() const {
    std::vector<std::string> keys;
    keys.reserve(layout_.buckets());
    for (std::uint32_t b = 0; b < layout_.buckets(); ++b)
      keys.push_back(layout_.layout(b));
    return keys;
  }

  // A sorted set's score as the server writes it (a time in milliseconds).
  static TimePoint score_of(std::string_view s) {
    double d = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec != std::errc{} || end != s.data() + s.size()) {
      throw CorruptRecord(fmt::format("idem::redis: an index score \"{}\" is not a time",
                                      idem::detail::printable(s)));
    }
    return TimePoint{Duration{static_cast<std::int64_t>(d)}};
  }

  // A record's values in record_fields' order, as the scripts write them.
  static std::array<std::string, record_fields.size()> encode(const Record& r) {
    auto ms = [](TimePoint t) { return decimal(t.time_since_epoch().count()); };
    return {std::string(to_string(r.status)),
            decimal(static_cast<std::int64_t>(r.ticket.fence)),
            r.ticket.owner,
            r.fingerprint,
            r.snapshot,
            r.retryable ? "1" : "0",
            decimal(r.attempts),
            ms(r.created_at),
            ms(r.updated_at),
            ms(r.lease_until),
            ms(r.expire_at),
            r.recovery_points,
            r.repair_reason,
            r.repaired_at ? ms(*r.repaired_at) : std::string()};
  }

  std::size_t sweep(Connection& c, std::size_t batch, const Sweep& sweep) const {
    if (batch == 0) return 0;
    const std::vector<ScriptRequest> scans = due_requests(sweep, batch);
    const std::vector<Reply> due = c.eval_all(scripts_.due, calls(scans));
    const std::vector<ScriptRequest> acts = act_requests(sweep, batch, due);
    return changed(c.eval_all(*sweep.act, calls(acts)));
  }

  Layout layout_;
  std::string keep_;
  RecordScripts scripts_;
};

// Stale claims come from the lease index (scored by lease_until) and outcome_unknown records from
// the unknown index (scored by updated_at), each read in the order list() answers in, so that a
// call reads about the records it lists: index pages (each bucket's, pipelined), then the
// records they name (pipelined), kept by backend::matches() at the server's now of their read; a
// bucket is read further only while its pages came full and could still hold a record before
// the last of the best `limit` found so far. Any other query walks every record (IndexWalk):
// the expiry index holds all but the outcome_unknown ones (docs/redis.md, "Listing").
class RecordOps::ListRun {
 public:
  // `ops` outlives the run.
  ListRun(const RecordOps& ops, RecordQuery q) : ops_(ops), q_(std::move(q)) {
    const bool unknown = q_.status == Status::outcome_unknown;
    ordered_ = q_.stale || unknown;
    std::vector<IndexCursor> cursors;
    const Layout& layout = ops_.layout_;
    for (std::uint32_t b = 0; b < layout.buckets(); ++b) {
      if (ordered_) {
        cursors.push_back({b, unknown ? layout.unknown(b) : layout.leases(b)});
      } else {
        cursors.push_back({b, layout.expiry(b), "0"});
        if (!q_.status) cursors.push_back({b, layout.unknown(b), "0"});
      }
    }
    if (!ordered_) {
      walk_.emplace(std::move(cursors));
      return;
    }
    // How far before the server's now an ordered index's scores end: a stale lease has run
    // out; an outcome_unknown record was last updated not_updated_for ago.
    if (unknown) until_ = q_.not_updated_for ? decimal(q_.not_updated_for->count()) : "";
    page_ = std::min<std::size_t>(q_.limit, 2 * (q_.limit / layout.buckets()) + 8);
    count_ = decimal(static_cast<std::int64_t>(page_));
    open_ = std::move(cursors);
  }

  bool done() const noexcept { return phase_ == Phase::done; }

  // The next round trip: one script, pipelined over calls() (views of the run, until answer()).
  const Script& script() const noexcept {
    if (phase_ == Phase::reads) return ops_.scripts_.read;
    return ordered_ ? ops_.scripts_.range : ops_.scripts_.scan;
  }
  std::vector<ScriptCall> calls() const {
    if (phase_ == Phase::reads) return read_calls(got_);
    if (!ordered_) return walk_->calls();
    std::vector<ScriptCall> out;
    out.reserve(open_.size());
    for (const IndexCursor& cur : open_)
      out.push_back({{cur.index}, {until_, cur.from, cur.skip, count_}});
    return out;
  }

  // The replies of that round trip, in calls()' order.
  void answer(const std::vector<Reply>& replies) {
    if (phase_ == Phase::done) throw UsageError("idem::redis: the listing has ended");
    if (phase_ == Phase::reads) {
      keep_best(q_, got_, replies, found_);
      got_ = {};
      next_pages();
      return;
    }
    if (ordered_) {
      took_ordered(replies);
    } else {
      walk_->answer(replies, [&](std::uint32_t bucket, ReplyView page) {
        ops_.take(got_, q_, bucket, page);
      });
    }
    phase_ = Phase::reads;
    if (got_.keys.empty()) answer({});  // no record to read
  }

  std::vector<Record> result() && { return std::move(found_); }

 private:
  enum class Phase { pages, reads, done };

  // An ordered round's pages: their candidates, and the cursors of the buckets that may hold
  // more.
  void took_ordered(const std::vector<Reply>& pages) {
    for (std::size_t i = 0; i < open_.size(); ++i) {
      const std::size_t n = ops_.take(got_, q_, open_[i].bucket, pages[i]);
      if (n < page_) continue;  // the bucket has no more
      IndexCursor& cur = open_[i];
      const std::string_view last = pages[i][2 * n - 1].text();
      std::size_t ties = 0;  // the page's last members share its last score
      while (ties < n && pages[i][2 * (n - ties) - 1].text() == last)
        ++ties;
      cur.skipped = last == cur.from ? cur.skipped + n : ties;
      cur.from = std::string(last);
      cur.skip = decimal(static_cast<std::int64_t>(cur.skipped));
      cur.last = score_of(last);
      more_.push_back(std::move(cur));
    }
    open_.clear();
  }

  void next_pages() {
    if (!ordered_) {
      phase_ = walk_->done() ? Phase::done : Phase::pages;
      return;
    }
    // With `limit` kept, a bucket whose next page starts at or after the last kept record's
    // key has nothing to add (ties are listed in any order).
    const bool full = !found_.empty() && found_.size() == q_.limit;
    const TimePoint last_kept =
        full ? (q_.stale ? found_.back().lease_until : found_.back().updated_at) : TimePoint{};
    for (IndexCursor& cur : more_) {
      if (full && cur.last >= last_kept) continue;
      open_.push_back(std::move(cur));
    }
    more_.clear();
    phase_ = open_.empty() ? Phase::done : Phase::pages;
  }

  const RecordOps& ops_;
  RecordQuery q_;
  bool ordered_ = false;
  Phase phase_ = Phase::pages;
  std::optional<IndexWalk> walk_;  // not ordered
  std::vector<IndexCursor> open_;  // ordered: the next round's cursors
  std::vector<IndexCursor> more_;  // ordered: the buckets that may hold more
  std::string until_ = "0";
  std::size_t page_ = 0;
  std::string count_;
  Candidates got_;
  std::vector<Record> found_;
};

inline std::vector<Record> RecordOps::list(Connection& c, const RecordQuery& q) const {
  ListRun run(*this, q);
  while (!run.done())
    run.answer(c.eval_all(run.script(), run.calls()));
  return std::move(run).result();
}

// idem::redis for the store skeleton (idem/backend/store_skeleton.hpp).
struct Backend : backend::BackendTypes<redis::Connection, redisContext, redis::Pool, RecordOps> {
  static constexpr std::string_view name = RecordOps::name;

  // An error reply of a server that is loading, failing over or moving slots: the script did
  // not run, try again. A lost connection or a timed-out reply: it may have run, so a retry
  // looks at the record first. Anything else (a refused AUTH, OOM under maxmemory, a script
  // error) is not retried.
  static backend::FailureKind classify(const StoreError& e) noexcept {
    const Diagnostics& d = e.diagnostics();
    if (d.from_server)
      return is_transient_reply(d.message) ? backend::FailureKind::transient
                                           : backend::FailureKind::fatal;
    return is_connection_lost(d.code) ? backend::FailureKind::reply_lost
                                      : backend::FailureKind::fatal;
  }
};

// Throws InvalidArgument when a parameter breaks its rule.
inline void validate(const StoreParams& p) {
  if (p.prefix.empty() || p.prefix.size() > 64) {
    throw InvalidArgument(fmt::format(
        "idem::redis::Store: prefix must be 1-64 bytes of [A-Za-z0-9_.:-], got {} bytes",
        p.prefix.size()));
  }
  for (const char ch : p.prefix) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == ':' || ch == '-';
    if (!ok) {
      throw InvalidArgument(fmt::format(
          "idem::redis::Store: prefix must be 1-64 bytes of [A-Za-z0-9_.:-], got \"{}\"",
          idem::detail::printable(p.prefix)));
    }
  }
  if (p.buckets < 1 || p.buckets > 16384) {
    throw InvalidArgument(
        fmt::format("idem::redis::Store: buckets must be 1-16384, got {}", p.buckets));
  }
  if (p.keep_expired < std::chrono::seconds{1}) {
    throw InvalidArgument(
        fmt::format("idem::redis::Store: keep_expired must be at least 1000 ms, got {} ms",
                    p.keep_expired.count()));
  }
}

}  // namespace detail

}  // namespace idem::redis
