#pragma once
// One round of the Janitor as steps without I/O: what to do next, given what the last step
// answered. The blocking Janitor (idem/janitor.hpp) and the coroutine one
// (idem/async/janitor.hpp) carry each step out on their store; the order of the jobs, what a
// failure skips and what is counted live here once.
//
// A round: the purge (bounded batches, a pause between two); then, with resolvers, for each
// biz_type with a resolver its stale claims and its outcome_unknown records due for another
// question, each asked and repaired by the answer, and the count of its outcome_unknown
// records; then the fenced release of the stale claims of the other biz_types. Without
// resolvers: the stale-claim gauge (a store that lists, with metrics), then release_stale.
// Each job fails on its own: a failed purge must not keep dead claims from being released.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/backend/housekeeping.hpp"
#include "idem/errors.hpp"
#include "idem/janitor_params.hpp"
#include "idem/metrics.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/repair.hpp"
#include "idem/resolver.hpp"
#include "idem/status.hpp"

namespace idem::detail {

// Throws InvalidArgument for params a Janitor cannot work with (`can_resolve`: its store lists
// and repairs records).
inline JanitorParams checked_janitor_params(JanitorParams p, bool can_resolve) {
  if (p.resolvers != nullptr && !can_resolve) {
    throw InvalidArgument("idem::Janitor: resolvers need a store that can list and repair records");
  }
  if (p.resolve_batch == 0) throw InvalidArgument("idem::Janitor: resolve_batch must be >= 1");
  return p;
}

// What a Janitor counted: its stats() and its Metrics (JanitorParams::metrics). Read from any
// thread while a round runs.
class JanitorTally {
 public:
  using Task = Metrics::JanitorCounters::Task;
  using Answer = Metrics::JanitorCounters::Answer;

  explicit JanitorTally(Metrics* metrics) noexcept : metrics_(metrics) {}

  void purged(std::size_t n) noexcept {
    purged_ += n;
    if (metrics_ != nullptr) metrics_->janitor().purged(n);
  }
  void purge_unfinished() noexcept {
    ++purge_unfinished_;
    if (metrics_ != nullptr) metrics_->janitor().purge_unfinished();
  }
  void released(std::size_t n) noexcept {
    released_ += n;
    if (metrics_ != nullptr) metrics_->janitor().released(n);
  }
  void resolved(Answer a) noexcept {
    ++(a == Answer::happened ? happened_ : a == Answer::not_happened ? not_happened_ : unknown_);
    if (metrics_ != nullptr) metrics_->janitor().resolved(a);
  }
  // Counts `error`, what a task of the round threw: retryable or permanent.
  void failed(Task task, const std::exception_ptr& error) noexcept {
    bool retryable = false;
    try {
      std::rethrow_exception(error);
    } catch (const StoreError& e) {
      retryable = e.retryable();
    } catch (...) {
    }
    ++(retryable ? retryable_errors_ : permanent_errors_);
    if (metrics_ != nullptr) metrics_->janitor().failed(task, retryable);
  }
  void stale_claims(std::uint64_t n) noexcept {
    stale_ = n;
    if (metrics_ != nullptr) metrics_->janitor().stale_claims(n);
  }
  void outcome_unknown(std::uint64_t n) noexcept { outcome_unknown_ = n; }
  void outcome_unknown_of(std::string_view biz_type, std::uint64_t n) noexcept {
    if (metrics_ != nullptr) metrics_->outcome_unknown_records(biz_type, n);
  }
  // The metrics first: a reader that sees stats().rounds move finds the round in them too.
  void round_ended() noexcept {
    if (metrics_ != nullptr) metrics_->janitor().round_ended(std::chrono::system_clock::now());
    ++rounds_;
  }

  JanitorStats stats() const noexcept {
    return {.rounds = rounds_.load(),
            .purged = purged_.load(),
            .released = released_.load(),
            .errors = retryable_errors_.load() + permanent_errors_.load(),
            .retryable_errors = retryable_errors_.load(),
            .resolved_happened = happened_.load(),
            .resolved_not_happened = not_happened_.load(),
            .resolved_unknown = unknown_.load(),
            .outcome_unknown = outcome_unknown_.load(),
            .stale_claims = stale_.load(),
            .purge_unfinished = purge_unfinished_.load()};
  }

 private:
  Metrics* metrics_;
  std::atomic<std::uint64_t> rounds_{0}, purged_{0}, released_{0};
  std::atomic<std::uint64_t> retryable_errors_{0}, permanent_errors_{0};
  std::atomic<std::uint64_t> happened_{0}, not_happened_{0}, unknown_{0}, outcome_unknown_{0};
  std::atomic<std::uint64_t> stale_{0}, purge_unfinished_{0};
};

// One round (see the header comment). The driver calls start(), carries out each step it is
// given, and answers with the call that says how the step went, until a step is done.
class JanitorRound {
 public:
  using Task = JanitorTally::Task;
  using Answer = JanitorTally::Answer;

  enum class Op {
    purge,    // store.purge_expired(batch, 1), then purged(n)
    pause,    // wait `pause` (or stop the round), then paused()
    list,     // store.list(query), then listed(records)
    resolve,  // ask the resolvers about *record, then resolved(answer)
    repair,   // store.repair(record->key, repair), then repaired() or, RepairRefused,
              // repair_refused()
    release,  // store.release_stale(batch), then released(n)
    done,     // the round ended
  };
  struct Step {
    Op op = Op::done;
    std::size_t batch = 0;
    std::chrono::milliseconds pause{0};
    RecordQuery query{};
    const Record* record = nullptr;  // valid until the next step
    Repair repair{};
  };

  // `can_list`: the store lists records (for the stale-claim gauge). With params.resolvers
  // set the store must also repair (checked_janitor_params). `params` and `tally` must
  // outlive the round.
  JanitorRound(const JanitorParams& params, JanitorTally& tally, bool can_list) noexcept
      : params_(params),
        tally_(tally),
        can_list_(can_list),
        purge_(params.purge_batch, params.purge_max_batches) {}

  Step start() {
    if (purge_.more()) return {.op = Op::purge, .batch = purge_.batch()};
    return after_purge();
  }

  Step purged(std::size_t n) {
    purge_.done(n);
    tally_.purged(n);
    if (purge_.more()) return {.op = Op::pause, .pause = params_.purge_pause};
    // Every batch was full: expired records are left for the next round. Round after round,
    // the purge falls behind (raise purge_max_batches or purge_batch, or shorten interval).
    if (purge_.unfinished()) tally_.purge_unfinished();
    return after_purge();
  }
  Step paused() const { return {.op = Op::purge, .batch = purge_.batch()}; }

  Step listed(std::vector<Record> records) {
    switch (phase_) {
      case Phase::stale_gauge:
        // Only for the gauge: release_stale releases them whether counted or not.
        stale_seen(records.size());
        return release();
      case Phase::resolve_stale:
        stale_now_ += records.size();
        [[fallthrough]];
      case Phase::resolve_unknown:
        records_ = std::move(records);
        next_ = 0;
        return next_record();
      case Phase::count_unknown:
        unknown_seen_ += records.size();
        if (!listing_failed_) tally_.outcome_unknown_of(types_[type_], records.size());
        ++type_;
        return next_type();
      case Phase::release_others:
        stale_seen(stale_now_ + static_cast<std::uint64_t>(std::count_if(
                                    records.begin(), records.end(), [&](const Record& r) {
                                      return !params_.resolvers->covers(r.key.biz_type());
                                    })));
        records_ = std::move(records);
        next_ = 0;
        return next_release();
      case Phase::purge:
      case Phase::release:
      case Phase::done:
        break;
    }
    return end();
  }

  // Carries out the resolver's answer about the record, read at its fence.
  Step resolved(const Resolution& answer) {
    const Record& r = records_[next_];
    answer_ = answer.kind() == Resolution::Kind::happened       ? Answer::happened
              : answer.kind() == Resolution::Kind::not_happened ? Answer::not_happened
                                                                : Answer::unknown;
    return {.op = Op::repair, .record = &r, .repair = *repair_for(answer, r.ticket.fence, false)};
  }

  // A repair written: counted as the resolver's answer, or as a release.
  Step repaired() {
    if (answer_) {
      tally_.resolved(*answer_);
    } else {
      tally_.released(1);
    }
    return after_repair();
  }
  // The record moved on meanwhile (a claim took it over): left alone.
  Step repair_refused() { return after_repair(); }

  Step released(std::size_t n) {
    tally_.released(n);
    return end();
  }

  // The current step threw `error`: counted as its task's failure, and the round goes on
  // without it (a failed listing answers no records, and the gauges keep what the last full
  // look saw).
  Step failed(const std::exception_ptr& error) {
    switch (phase_) {
      case Phase::purge:
        tally_.failed(Task::purge, error);
        return after_purge();
      case Phase::release:
        tally_.failed(Task::release, error);
        return end();
      case Phase::stale_gauge:
      case Phase::resolve_stale:
      case Phase::resolve_unknown:
      case Phase::count_unknown:
      case Phase::release_others:
        if (listing_) {
          tally_.failed(Task::list, error);
          listing_failed_ = true;
          return listed({});
        }
        tally_.failed(Task::repair, error);
        return after_repair();
      case Phase::done:
        break;
    }
    return end();
  }

 private:
  enum class Phase {
    purge,
    stale_gauge,      // without resolvers: the listing for the gauge
    release,          // without resolvers: release_stale
    resolve_stale,    // a biz_type's stale claims, asked and repaired
    resolve_unknown,  // its outcome_unknown records due for another question
    count_unknown,    // its outcome_unknown records, counted
    release_others,   // the fenced release of the stale claims no resolver covers
    done,
  };

  Step after_purge() {
    if (params_.resolvers != nullptr) {
      types_ = params_.resolvers->biz_types();
      return next_type();
    }
    if (can_list_ && params_.metrics != nullptr && params_.release_batch > 0) {
      phase_ = Phase::stale_gauge;
      return list({.stale = true}, params_.release_batch);
    }
    return release();
  }

  Step release() {
    phase_ = Phase::release;
    return {.op = Op::release, .batch = params_.release_batch};
  }

  Step list(RecordQuery query, std::size_t limit) {
    query.limit = std::min(limit, max_list_limit);
    listing_ = true;
    return {.op = Op::list, .query = std::move(query)};
  }

  Step next_type() {
    listing_ = false;
    if (type_ < types_.size()) {
      phase_ = Phase::resolve_stale;
      return list({.stale = true, .biz_type = types_[type_]}, params_.resolve_batch);
    }
    tally_.outcome_unknown(unknown_seen_);
    if (params_.release_batch == 0) {
      stale_seen(stale_now_);
      return end();
    }
    phase_ = Phase::release_others;
    return list({.stale = true}, params_.release_batch);
  }

  Step next_record() {
    listing_ = false;
    if (next_ < records_.size()) return {.op = Op::resolve, .record = &records_[next_]};
    if (phase_ == Phase::resolve_stale) {
      phase_ = Phase::resolve_unknown;
      return list({.status = Status::outcome_unknown,
                   .biz_type = types_[type_],
                   .not_updated_for = params_.unknown_retry},
                  params_.resolve_batch);
    }
    phase_ = Phase::count_unknown;
    return list({.status = Status::outcome_unknown, .biz_type = types_[type_]},
                params_.resolve_batch);
  }

  Step next_release() {
    listing_ = false;
    for (; next_ < records_.size(); ++next_) {
      const Record& r = records_[next_];
      if (params_.resolvers->covers(r.key.biz_type())) continue;  // resolved, or next round
      answer_.reset();
      return {.op = Op::repair,
              .record = &r,
              .repair = Repair{.action = RepairAction::release,
                               .fence = r.ticket.fence,
                               .reason = "janitor: lease ran out (no resolver for this biz_type)"}};
    }
    return end();
  }

  Step after_repair() {
    ++next_;
    return phase_ == Phase::release_others ? next_release() : next_record();
  }

  // A round whose listing failed saw nothing: the gauges keep what the last full look saw.
  void stale_seen(std::uint64_t n) noexcept {
    if (!listing_failed_) tally_.stale_claims(n);
  }

  Step end() {
    phase_ = Phase::done;
    tally_.round_ended();
    return {};
  }

  const JanitorParams& params_;
  JanitorTally& tally_;
  bool can_list_;
  Phase phase_ = Phase::purge;
  backend::HousekeepingBatches purge_;
  std::vector<std::string> types_;
  std::size_t type_ = 0;
  std::vector<Record> records_;
  std::size_t next_ = 0;
  std::optional<Answer> answer_;  // of the repair under way; none: a release
  bool listing_ = false;          // the step under way is a listing
  bool listing_failed_ = false;
  std::uint64_t stale_now_ = 0;
  std::uint64_t unknown_seen_ = 0;
};

}  // namespace idem::detail
