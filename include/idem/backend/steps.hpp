#pragma once
// The store skeleton's algorithms as steps, without I/O: a claim's rounds, a finish that
// reconciles a lost reply, and the tries of an operation (the loop's rule is RetryLoop,
// idem/retry.hpp). Each is a small state machine that
// says which statement to run next and takes that statement's answer; a driver runs the
// statements. The blocking skeleton (idem/backend/store_skeleton.hpp) and the coroutine one
// (idem/backend/async_store_skeleton.hpp) are two such drivers, so both take every decision from here.

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "idem/backend/record_rules.hpp"
#include "idem/backend/retry_loop.hpp"
#include "idem/detail/recovery_points.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/repair.hpp"
#include "idem/retry_policy.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::backend {

// How a backend classifies a StoreError for its retry loop.
enum class FailureKind {
  fatal,       // not retried: a bug, bad data, a full pool, an unknown error
  transient,   // retried; the failed statement did not happen (deadlock, lock wait, busy file)
  reply_lost,  // retried; the statement may have happened (the connection died after it was
               // sent): a later try must look at the row before it writes
};

// A row as read, with the store's `now` at that read (the server's clock on MySQL).
struct RecordRead {
  Record record;
  TimePoint now;
};

// What insert_or_read answers: the fresh claim it wrote, or else the row it met (none: the
// row vanished in between, so the claim tries again).
struct InsertOrRead {
  std::optional<Record> fresh;
  std::optional<RecordRead> met;
};

// Each round of a claim loses only to another caller's completed write, so a bound is only a
// guard against a bug: a claim that does not settle is a retryable StoreError.
inline constexpr int claim_rounds = 16;

// One claim by the decision table. Each round inserts a fresh claim; when the key exists it
// reads the row and decides; a takeover is written guarded by the ticket it read, and a lost
// takeover (someone else moved the row on) starts the next round. `token` is the owner token
// of this claim call: if an earlier try of the same call already wrote it (its reply was
// lost), the row is recognised as ours.
class ClaimSteps {
 public:
  enum class Step {
    insert,     // ops.insert (or ops.insert_or_read), then inserted() (or answered())
    read,       // ops.read, then met()
    take_over,  // ops.write_takeover(decision(), next(), read_ticket()), then written()
    done,       // result()
  };

  ClaimSteps(std::string_view who, const Key& key, std::string_view fingerprint,
             const Options& options, const std::string& token)
      : who_(who), key_(key), fingerprint_(fingerprint), options_(options), token_(token) {}

  Step start() const noexcept { return Step::insert; }

  Step inserted(std::optional<Record> fresh) {
    if (!fresh) return Step::read;
    return settle(Verdict::acquired, std::move(*fresh));
  }

  Step met(std::optional<RecordRead> row) {
    if (!row) return next_round();  // purged between the insert and the read: insert again
    Record& stored = row->record;
    if (stored.ticket.owner == token_) {
      // An earlier try's write, whose reply was lost. Whether it took over a crashed attempt
      // is no longer known; a takeover is taken as one, so that a resolver is asked.
      const bool took_over = stored.ticket.fence > 1;
      return settle(Verdict::acquired, std::move(stored), took_over);
    }
    decision_ = decide(stored, fingerprint_, row->now);
    if (!is_takeover(decision_)) return settle(verdict_of(decision_), std::move(stored));
    next_.emplace(take_over(stored, decision_, fingerprint_, token_, row->now, options_));
    read_ = std::move(stored.ticket);
    return Step::take_over;
  }

  Step answered(InsertOrRead answer) {
    return answer.fresh ? inserted(std::move(answer.fresh)) : met(std::move(answer.met));
  }

  Step written(bool won) {
    if (won) return settle(Verdict::acquired, std::move(*next_), resumes_crashed(decision_));
    return next_round();  // someone else moved the row on: look again
  }

  // For Step::take_over: what to write, and the ticket the write is guarded by.
  Decision decision() const noexcept { return decision_; }
  const Record& next() const noexcept { return *next_; }
  const Ticket& read_ticket() const noexcept { return read_; }

  ClaimResult result() && { return std::move(*result_); }

 private:
  Step settle(Verdict v, Record r, bool after_crash = false) {
    result_.emplace(ClaimResult{v, std::move(r), after_crash});
    return Step::done;
  }

  Step next_round() {
    if (++round_ >= claim_rounds) {
      throw StoreError(fmt::format("{}: the claim on {}/{} did not settle after {} rounds", who_,
                                   key_.biz_type(), detail::printable(key_.id()), claim_rounds),
                       true);
    }
    return Step::insert;
  }

  std::string_view who_;
  const Key& key_;
  std::string_view fingerprint_;
  const Options& options_;
  const std::string& token_;
  int round_ = 0;
  Decision decision_ = Decision::replay;
  std::optional<Record> next_;
  Ticket read_;
  std::optional<ClaimResult> result_;
};

// A repair (idem/repair.hpp) on one connection: read the row, check the fence the caller read,
// write repaired() guarded by the ticket read; a lost write (the row moved on in between)
// reads again, and then the fence no longer holds. A row carrying this call's owner token is
// this call's own write whose reply was lost.
class RepairSteps {
 public:
  enum class Step {
    read,   // ops.read, then met()
    write,  // ops.write_repair(next(), read_ticket()), then written()
    done,   // result()
  };

  RepairSteps(std::string_view who, const Key& key, const Repair& repair, const std::string& token)
      : who_(who), key_(key), repair_(repair), token_(token) {}

  Step start() const noexcept { return Step::read; }

  // Throws RepairRefused when there is no row or its fence moved on.
  Step met(std::optional<RecordRead> row) {
    if (!row) throw repair_refused(who_, key_, repair_.fence, std::nullopt);
    if (row->record.ticket.owner == token_) return settle(std::move(row->record));
    if (!repair_holds(row->record, repair_.fence)) {
      throw repair_refused(who_, key_, repair_.fence, std::move(row->record));
    }
    next_.emplace(repaired(row->record, repair_, token_, row->now));
    read_ = std::move(row->record.ticket);
    return Step::write;
  }

  Step written(bool won) {
    if (won) return settle(std::move(*next_));
    return Step::read;
  }

  const Record& next() const noexcept { return *next_; }
  const Ticket& read_ticket() const noexcept { return read_; }
  Record result() && { return std::move(*result_); }

 private:
  Step settle(Record r) {
    result_.emplace(std::move(r));
    return Step::done;
  }

  std::string_view who_;
  const Key& key_;
  const Repair& repair_;
  const std::string& token_;
  std::optional<Record> next_;
  Ticket read_;
  std::optional<Record> result_;
};

// A step's result added to the recovery points (idem/detail/recovery_points.hpp) on one
// connection: read the row, check that the claim still holds, write the new points guarded by
// the claim and by the points read (so that no concurrent write of the same claim's points is
// lost); a lost write reads again. A step already kept (also this call's own write whose reply
// was lost) answers the points as stored.
class StepSteps {
 public:
  enum class Step {
    read,   // ops.read, then met()
    write,  // ops.write_points(key, ticket, before(), after()), then written()
    done,   // result()
  };

  // `known`: the recovery points the caller believes are stored (its claim's, plus the steps it
  // wrote since). Given, the first try writes at once, guarded by them, and reads only when
  // they turn out stale: one round trip instead of two. A guess that already holds the step
  // proves nothing (the write that put it there may have rolled back): that one is read.
  StepSteps(std::string_view who, const Key& key, const Ticket& ticket, std::string_view step,
            std::string_view result, std::optional<std::string_view> known = std::nullopt)
      : who_(who), key_(key), ticket_(ticket), step_(step), result_text_(result) {
    // A bad step or result is InvalidArgument, first (with_step checks it before anything).
    if (!known) {
      detail::checked_step(step_, result_text_);
      return;
    }
    before_ = std::string(*known);
    after_ = detail::with_step(before_, step_, result_text_);
    first_ = after_ == before_ ? Step::read : Step::write;
  }

  Step start() const noexcept { return first_; }

  Step met(std::optional<RecordRead> row) {
    if (!row || !holds(row->record, ticket_)) throw lease_lost(who_, key_, ticket_);
    before_ = std::move(row->record.recovery_points);
    after_ = detail::with_step(before_, step_, result_text_);
    if (after_ == before_) return Step::done;
    return Step::write;
  }

  Step written(bool won) {
    if (won) return Step::done;
    if (++round_ >= claim_rounds) {
      throw StoreError(
          fmt::format("{}: the step {} of {}/{} did not settle after {} rounds", who_, step_,
                      key_.biz_type(), detail::printable(key_.id()), claim_rounds),
          true);
    }
    return Step::read;
  }

  const std::string& before() const noexcept { return before_; }
  const std::string& after() const noexcept { return after_; }
  std::string result() && { return std::move(after_); }

 private:
  std::string_view who_;
  const Key& key_;
  const Ticket& ticket_;
  std::string_view step_;
  std::string_view result_text_;
  std::string before_;
  std::string after_;
  int round_ = 0;
  Step first_ = Step::read;
};

// complete / fail on one try: the fenced write, and when an earlier try lost its connection
// after sending it (`uncertain`), a look at the row before it, and after it when it changed
// nothing (the killed try may still have been committing during the first look; the write
// waited for its row lock, so a look now tells whether that write was ours).
class FinishSteps {
 public:
  enum class Step {
    look,   // ops.read, then looked(ours(row))
    write,  // ops.finish, then wrote()
    done,   // held()
  };

  explicit FinishSteps(bool uncertain) noexcept : uncertain_(uncertain) {}

  Step start() const noexcept { return uncertain_ ? Step::look : Step::write; }

  Step looked(bool ours) noexcept {
    if (ours || wrote_) return end(ours);
    return Step::write;
  }

  Step wrote(bool changed) noexcept {
    wrote_ = true;
    if (changed || !uncertain_) return end(changed);
    return Step::look;
  }

  // Whether the result is recorded; false: the claim was not held (LeaseLost).
  bool held() const noexcept { return held_; }

 private:
  Step end(bool held) noexcept {
    held_ = held;
    return Step::done;
  }

  bool uncertain_;
  bool wrote_ = false;
  bool held_ = false;
};

// Whether a row read back shows this finish already recorded (the look of FinishSteps).
inline bool finished_by(const std::optional<RecordRead>& row, const Ticket& ticket, Status to,
                        std::string_view snapshot, bool retryable) {
  return row && finished_as(row->record, ticket, to, snapshot, retryable);
}

// The tries of one store operation on pooled connections (both skeletons): a fatal failure
// ends the call, a transient one is tried again after the loop's pause, and a lost reply
// also makes the later tries uncertain (they look at the row before they write).
class OperationTries {
 public:
  using Classify = FailureKind (*)(const StoreError&);

  OperationTries(const RetryPolicy& policy, std::string_view who, std::string_view what,
                 Classify classify)
      : loop_(policy, who, what), classify_(classify) {}

  bool uncertain() const noexcept { return uncertain_; }
  int attempt() const noexcept { return loop_.attempt(); }
  // Called in the handler of the current try's StoreError `e`: rethrows a fatal one, throws
  // the loop's "gave up" after the last try, and otherwise answers the pause before the next.
  Duration failed(const StoreError& e) {
    const FailureKind kind = classify_(e);
    if (kind == FailureKind::fatal) throw;
    if (kind == FailureKind::reply_lost) uncertain_ = true;
    return loop_.failed(e);
  }

 private:
  RetryLoop loop_;
  Classify classify_;
  bool uncertain_ = false;
};

}  // namespace idem::backend
