#pragma once
// One try of a with_transaction (idem::mysql, idem::sqlite): how it ends, as the claims made inside
// it say (idem/same_transaction/claim_ledger.hpp), and what its failure reports. Each backend says
// how to begin, commit and roll back on its handle; the rule lives here once.

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/retry.hpp"
#include "idem/same_transaction/claim_ledger.hpp"

namespace idem::same_transaction {

// Who the failures of a with_transaction try are reported to, and under which key: the
// claims of the try carry the observer of their options (nothing is reported before the
// first claim).
struct TryReport {
  Observer* observer = nullptr;
  std::optional<Key> key;
  std::string context;

  void take(const ClaimLedger& ledger) {
    observer = ledger.observer();
    if (const Key* k = ledger.first_key()) key = *k;
    context = ledger.context();
  }
  void send(EventKind kind, std::chrono::nanoseconds latency, const std::exception& e) const {
    if (observer == nullptr) return;
    const std::string_view biz_type = key ? key->biz_type() : std::string_view{};
    const std::string_view id = key ? key->id() : std::string_view{};
    observer->on_event(Event{kind, biz_type, id, latency, &e, 0, 0, {}, context});
  }
};

// How a try whose body returned ends, as its ledger says: true to commit, false to roll back.
// A superseded record-last claim throws the ledger's retryable StoreError (the try runs again
// and replays the winner's result), a misuse UsageError prefixed with `who`.
inline bool try_commits(const ClaimLedger& ledger, std::string_view who) {
  switch (ledger.ending()) {
    case ClaimLedger::Ending::commit:
      return true;
    case ClaimLedger::Ending::roll_back:
      return false;
    case ClaimLedger::Ending::retry:
      throw ledger.superseded_error(who);
    case ClaimLedger::Ending::misuse:
      break;
  }
  throw UsageError(fmt::format("{}: rolled back: {}", who, ledger.why()));
}

// After a try threw `error` (the caller rolls its transaction back): notes in `report` whom
// to tell, settles the try's held events, and returns what the try throws. A superseded
// record-last claim's retryable StoreError replaces any other exception: a speculative body
// that met the winner's writes (its duplicate row, its changed state) fails for that reason,
// and the next try replays the winner's result. A StoreError drops the try's events
// (with_transaction reports it); the body's own exception delivers them.
// Never throws (the caller still has to roll back): out of memory, the try throws `error`.
inline std::exception_ptr try_failed(ClaimLedger& ledger, TryReport& report,
                                     std::exception_ptr error, std::string_view who) noexcept {
  try {
    report.take(ledger);
    if (ledger.superseded() != nullptr) {
      ledger.failed();
      return std::make_exception_ptr(ledger.superseded_error(who));
    }
    try {
      std::rethrow_exception(error);
    } catch (const StoreError&) {
      ledger.failed();
    } catch (...) {
      ledger.rolled_back();
    }
  } catch (...) {
  }
  return error;
}

// What the writes after a try's ROLLBACK are called in errors, and the error that ends them.
inline constexpr std::string_view after_rollback_what =
    "recording the failed attempt after the rollback";
inline StoreError after_rollback_failed(std::string_view who, const StoreError& e) {
  return StoreError(fmt::format("{}: {} failed: {}", who, after_rollback_what, e.what()), false,
                    e.diagnostics());
}

// The writes that wait for the try's ROLLBACK (ClaimLedger::after_rollback), in one
// transaction of their own on tx, tried again (as a store tries a statement) while they fail
// transiently: a claim there can meet a deadlock among consumers of the same key. A failure
// that stays rolls that transaction back and leaves the try, naming what was not recorded.
template <class Tx>
void write_after_rollback(Tx& tx, ClaimLedger& ledger, std::string_view who) {
  retry(
      RetryPolicy{}, who, after_rollback_what,
      [&](int) {
        tx.begin();
        ledger.write_after_rollback();
        tx.commit();
      },
      [&](const StoreError& e, int) {
        tx.roll_back_quietly();
        if (!e.retryable()) throw after_rollback_failed(who, e);
      });
}

// How a try whose body returned ends, as steps without I/O: COMMIT, or ROLLBACK and then
// the writes that wait for it, as try_commits says. The blocking try (end_try below) and the
// coroutine try (idem::mysql's run_async_try) carry each step out on their connection.
class TryEnd {
 public:
  enum class Step {
    commit,                // send the record waiting in the ledger with the COMMIT, or COMMIT
    roll_back,             // ROLLBACK
    write_after_rollback,  // the ledger's writes that wait for the rollback (write_after_rollback)
    done,
  };

  // `writes_kept_apart`: writes wait for the rollback outside the ledger (the coroutine try
  // keeps its awaitable ones itself).
  TryEnd(ClaimLedger& ledger, std::string_view who, bool writes_kept_apart = false)
      : ledger_(ledger), who_(who), writes_kept_apart_(writes_kept_apart) {}

  // The first step; throws as try_commits does (a claim left open or abandoned).
  Step start() {
    commits_ = try_commits(ledger_, who_);
    return commits_ ? Step::commit : Step::roll_back;
  }
  // The step after `step` was carried out.
  Step done(Step step) {
    switch (step) {
      case Step::commit:
        ledger_.committed();
        return Step::done;
      case Step::roll_back:
        ledger_.rolled_back();
        return ledger_.writes_after_rollback() || writes_kept_apart_ ? Step::write_after_rollback
                                                                     : Step::done;
      case Step::write_after_rollback:
      case Step::done:
        break;
    }
    return Step::done;
  }
  // Whether the try committed (valid once start() returned).
  bool committed() const noexcept { return commits_; }

 private:
  ClaimLedger& ledger_;
  std::string_view who_;
  bool writes_kept_apart_;
  bool commits_ = false;
};

// Ends a try whose body returned, on tx (see run_try), by TryEnd's steps. A record-last
// claim's finished record that a bound store left waiting in the ledger is written together
// with the COMMIT; meeting another request's row there supersedes the claim. true: committed.
template <class Tx>
bool end_try(Tx& tx, ClaimLedger& ledger, std::string_view who) {
  using Step = TryEnd::Step;
  TryEnd end(ledger, who);
  for (Step step = end.start(); step != Step::done; step = end.done(step)) {
    switch (step) {
      case Step::commit:
        if (!ledger.send_deferred(true, who)) tx.commit();
        break;
      case Step::roll_back:
        tx.roll_back();
        break;
      case Step::write_after_rollback:
        write_after_rollback(tx, ledger, who);
        break;
      case Step::done:
        break;
    }
  }
  return end.committed();
}

// Ends a try that threw `error` (its body, or end_try): rolls tx back and throws what
// try_failed says, leaving in `report` whom to tell.
template <class Tx>
[[noreturn]] void abort_try(Tx& tx, ClaimLedger& ledger, TryReport& report,
                            std::exception_ptr error, std::string_view who) {
  const std::exception_ptr thrown = try_failed(ledger, report, std::move(error), who);
  tx.roll_back_quietly();
  std::rethrow_exception(thrown);
}

// Runs fn as one try on tx, which provides handle(), begin(), commit(), roll_back() and
// roll_back_quietly() noexcept: begins, and ends as end_try says, or as abort_try says when
// fn or the ending throws.
template <class Tx, class Fn>
std::invoke_result_t<Fn&> run_try(Tx& tx, std::string_view who, TryReport& report, Fn&& fn) {
  using R = std::invoke_result_t<Fn&>;
  ClaimLedger ledger;  // what the stores bound to the handle inside fn note their claims in
  ledger.hold_events();
  const LedgerScope scope(tx.handle(), ledger);
  tx.begin();
  try {
    if constexpr (std::is_void_v<R>) {
      fn();
      end_try(tx, ledger, who);
    } else {
      R result = fn();
      end_try(tx, ledger, who);
      return result;
    }
  } catch (...) {
    abort_try(tx, ledger, report, std::current_exception(), who);
  }
}

// The tries of a with_transaction, blocking or coroutine: a StoreError that is not retryable
// ends the call, a retryable one runs the body again after the loop's pause, up to
// params.retry.max_attempts tries; each retry, and the StoreError that leaves, is reported
// to the observer of the try's claims. `who` names the caller, e.g.
// "idem::mysql::with_transaction", and must outlive this.
class TransactionTries {
 public:
  TransactionTries(const TransactionParams& params, std::string_view who)
      : loop_(checked(params.retry, who), who, "") {}

  // The report of the try that starts now: whom its failures are told.
  TryReport& next_try() noexcept {
    report_ = TryReport{};
    return report_;
  }
  // Called in the handler of the current try's StoreError `e`: rethrows it (not retryable) or
  // throws the "gave up" error after the last try, either reported as store_error; otherwise
  // reports transaction_retried and answers the pause before the next try.
  Duration failed(const StoreError& e) {
    if (!e.retryable()) {
      report_.send(EventKind::store_error, std::chrono::steady_clock::now() - start_, e);
      throw;
    }
    if (loop_.last()) {
      const StoreError last = loop_.gave_up(e);
      report_.send(EventKind::store_error, std::chrono::steady_clock::now() - start_, last);
      throw last;
    }
    report_.send(EventKind::transaction_retried, std::chrono::nanoseconds{0}, e);
    return loop_.failed(e);
  }

 private:
  static const RetryPolicy& checked(const RetryPolicy& p, std::string_view who) {
    validate(p, who);
    return p;
  }

  backend::RetryLoop loop_;
  TryReport report_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Calls one_try(report) until it returns, as TransactionTries says.
template <class Try>
auto retry_transaction(const TransactionParams& params, std::string_view who, Try&& one_try)
    -> std::invoke_result_t<Try&, TryReport&> {
  TransactionTries tries(params, who);
  return backend::retrying([&]() -> decltype(auto) { return one_try(tries.next_try()); },
                           [&](const StoreError& e) { return tries.failed(e); });
}

}  // namespace idem::same_transaction
