#pragma once
// The claims made inside one transaction of a bound store, and how each ended: the one rule
// behind BoundStore::committable() and with_transaction's choice between COMMIT and ROLLBACK.
//
// A bound claim commits together with the business rows written beside it. Committed while
// still processing, abandoned or failed retryably, it lets the redelivery run the business a
// second time on top of the rows the first try left behind. So a transaction commits only
// when every claim in it succeeded or failed permanently.
//
// A record-last claim (idem::BoundClaim::record_last) writes its row only when it finishes;
// when that INSERT meets the row of another request for the key, the claim was superseded:
// the whole try must roll back and run again, and the run again replays the other's result.

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/observer.hpp"
#include "idem/options.hpp"
#include "idem/same_transaction/held_events.hpp"
#include "idem/status.hpp"
#include "idem/ticket.hpp"

namespace idem::same_transaction {

class ClaimLedger {
 public:
  enum class State { open, succeeded, failed, retryable, abandoned, superseded };

  struct Entry {
    Key key;
    Ticket ticket;
    State state = State::open;
  };

  // What the end of the transaction must do.
  enum class Ending {
    commit,     // every claim finished (or there was none)
    retry,      // a record-last claim was superseded: roll back and run the body again
    roll_back,  // the unfinished claims failed retryably, or the body asked for a rollback
                // (set_rollback_only): nothing of the try may stay; its result says so
    misuse,     // a claim was left open or abandoned, or a finished one shares the transaction
                // with a retryable one: roll back and throw UsageError(why())
  };

  // A write that waits to be sent with the try's COMMIT, in one round trip (a bound store of
  // with_transaction's, see BoundSqlStore): a record-last claim's finished record, a written
  // claim's result, a step's recovery points. write(true) writes it and commits, write(false)
  // writes it alone. A finished record answers false when it met another request's row (and
  // then committed nothing); a guarded UPDATE refused throws instead (LeaseLost, or a
  // retryable StoreError: the try runs again).
  struct Deferred {
    Key key;
    Ticket ticket;
    std::function<bool(bool with_commit)> write;
  };

  // At most one record waits: the store writes an earlier one (send_deferred) first.
  void defer(Deferred d) { deferred_ = std::move(d); }
  // Writes the waiting record, if any, alone or with the COMMIT; false when none waited. On
  // another request's row the claim is noted superseded and superseded_error(who) is thrown.
  // A failure with the COMMIT is the bound store's and is reported as its transaction_error
  // here (no guard is left to report it); one alone surfaces through the guard whose
  // operation sent it.
  bool send_deferred(bool with_commit, std::string_view who) {
    if (!deferred_) return false;
    Deferred d = std::move(*deferred_);
    deferred_.reset();
    Sending sending(*this, std::move(d.key), d.ticket, with_commit, who);
    bool written = false;
    try {
      written = d.write(with_commit);
    } catch (...) {
      sending.failed();
      throw;
    }
    return sending.answered(written);
  }

  // What send_deferred makes of a waiting write's answer, for it and for a coroutine
  // transaction's writes, which wait outside the ledger (an awaitable write cannot be kept
  // here): made just before the write is sent.
  class Sending {
   public:
    Sending(ClaimLedger& ledger, Key key, Ticket ticket, bool with_commit, std::string_view who)
        : ledger_(ledger),
          key_(std::move(key)),
          ticket_(ticket),
          with_commit_(with_commit),
          who_(who) {}

    // The write threw (call it in the handler, then let the exception through). Sent alone, its
    // claim is left without a result: noted open again, so that a body that catches the error
    // and goes on cannot commit the business without it. A StoreError sent with the COMMIT is
    // reported here.
    void failed() const {
      if (!with_commit_) ledger_.ended(key_, ticket_, State::open);
      try {
        throw;
      } catch (const StoreError& e) {
        report(e);
      } catch (...) {
      }
    }
    // The write answered `written`: true, and true passes; false, it met another request's
    // row: the claim is noted superseded and superseded_error(who) is thrown.
    bool answered(bool written) const {
      if (written) return true;
      ledger_.ended(key_, ticket_, State::superseded);
      const StoreError e = ledger_.superseded_error(who_);
      report(e);
      throw e;
    }

   private:
    void report(const StoreError& e) const {
      if (!with_commit_ || ledger_.observer_ == nullptr) return;
      ledger_.observer_->on_event(Event{EventKind::transaction_error,
                                        key_.biz_type(),
                                        key_.id(),
                                        std::chrono::steady_clock::now() - start_,
                                        &e,
                                        ticket_.fence,
                                        0,
                                        {},
                                        ledger_.context_});
    }

    ClaimLedger& ledger_;
    Key key_;
    Ticket ticket_;
    bool with_commit_;
    std::string_view who_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  };

  // Runs f once this transaction committed (not when it rolls back): an Attempt that completed
  // its action inside it learns that its record is written. f must not throw.
  void after_commit(std::function<void()> f) { after_commit_.push_back(std::move(f)); }

  // Runs f once this transaction rolled back as its claims asked (Ending::roll_back), in a
  // transaction of its own on the same connection that the try's runner commits: a bound
  // consumer's failed attempt, counted for its key although its claim rolled back with the
  // business's writes (idem/consume.hpp). f writes and does not commit; it may run again
  // after a transient StoreError, and one that stays leaves the try.
  void after_rollback(std::function<void()> f) { after_rollback_.push_back(std::move(f)); }
  bool writes_after_rollback() const noexcept { return !after_rollback_.empty(); }
  // Runs them all; again when their transaction failed and is tried again.
  void write_after_rollback() {
    for (auto& f : after_rollback_)
      f();
  }

  // Set by with_transaction's try: the guards on its bound stores report through
  // held(observer), which keeps their claims' answers and results until the try ends, so
  // that a try rolled back and run again is counted once, as the try that ended.
  void hold_events() noexcept { holding_ = true; }
  // The observer a guard on a store bound to this transaction reports to.
  Observer* held(Observer* observer) {
    if (!holding_ || observer == nullptr) return observer;
    for (HeldEvents& h : held_) {
      if (h.target() == observer || &h == observer) return &h;  // the latter: already held
    }
    return &held_.emplace_back(observer);
  }

  // Called by the try's runner right after its COMMIT succeeded.
  void committed() noexcept {
    for (auto& f : after_commit_)
      f();
    after_commit_.clear();
    for (HeldEvents& h : held_)
      h.deliver(true);
  }
  // Called by the try's runner after it rolled back as the claims asked (Ending::roll_back),
  // or when the body's own exception ends the try: the answers stand, nothing was committed.
  void rolled_back() noexcept {
    for (HeldEvents& h : held_)
      h.deliver(false);
  }
  // Called by the try's runner when a StoreError ends the try: with_transaction reports it
  // (transaction_retried, store_error), and the try's answers never reach anyone.
  void failed() noexcept {
    for (HeldEvents& h : held_)
      h.drop();
  }

  // The body's result already tells its caller that nothing of this transaction happened
  // (consume_batch turning every ack into retry_later): finished claims may roll back too.
  void set_rollback_only() noexcept { rollback_only_ = true; }

  // A claim is starting: its observer is the one the transaction's failures are reported to.
  // Its options' context goes with them.
  void claiming(const Options& options) {
    if (options.observer == nullptr) return;
    observer_ = options.observer;
    context_ = options.context;
  }
  void claimed(const Key& key, const Ticket& ticket) { entries_.push_back({key, ticket}); }
  // A superseded claim stays superseded: the guard abandons it after its commit failed.
  void ended(const Key& key, const Ticket& ticket, State state) noexcept {
    for (Entry& e : entries_) {
      if (e.ticket == ticket && e.key == key && e.state != State::superseded) e.state = state;
    }
  }

  Ending ending() const noexcept {
    if (superseded() != nullptr) return Ending::retry;
    bool finished = false;
    bool retryable = false;
    for (const Entry& e : entries_) {
      switch (e.state) {
        case State::superseded:
        case State::open:
        case State::abandoned:
          return Ending::misuse;
        case State::retryable:
          retryable = true;
          break;
        case State::succeeded:
        case State::failed:
          finished = true;
          break;
      }
    }
    if (rollback_only_) return Ending::roll_back;
    if (!retryable) return Ending::commit;
    return finished ? Ending::misuse : Ending::roll_back;
  }

  bool committable() const noexcept { return ending() == Ending::commit; }
  // Throws UsageError, naming the claim that forbids the commit (why()), unless committable();
  // `who` names the bound store ("idem::mysql").
  void check_committable(std::string_view who) const {
    if (!committable()) {
      throw UsageError(fmt::format("{}: do not commit this transaction: {}", who, why()));
    }
  }

  // How a claim ended whose result was written as `to` (complete: succeeded; fail: failed,
  // retryable or not).
  static State finished_state(Status to, bool retryable) noexcept {
    if (to == Status::succeeded) return State::succeeded;
    return retryable ? State::retryable : State::failed;
  }

  // Why the transaction must not commit, naming the claim; empty when it may.
  std::string why() const {
    const auto blocking = [&](State s) {
      return std::find_if(entries_.begin(), entries_.end(),
                          [s](const Entry& e) { return e.state == s; });
    };
    auto describe = [](const Entry& e, std::string_view what) {
      return fmt::format("the claim on {}/{} (fence {}) {}", e.key.biz_type(),
                         detail::printable(e.key.id()), e.ticket.fence, what);
    };
    if (auto it = blocking(State::superseded); it != entries_.end()) {
      return describe(*it,
                      "was superseded: another request for the key finished first; roll the "
                      "transaction back and run it again, and it will replay that result");
    }
    if (auto it = blocking(State::abandoned); it != entries_.end()) {
      return describe(*it,
                      "was abandoned: its guard was destroyed without commit() or fail(); commit "
                      "a result or fail it before the transaction ends");
    }
    if (auto it = blocking(State::open); it != entries_.end()) {
      return describe(*it, "is still processing: record a result before the transaction ends");
    }
    if (auto it = blocking(State::retryable); it != entries_.end()) {
      const bool mixed = std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) {
        return e.state == State::succeeded || e.state == State::failed;
      });
      return describe(*it, mixed ? "failed retryably in a transaction where other claims "
                                   "finished; it cannot commit without them, nor they "
                                   "without it: give each claim its own transaction"
                                 : "failed retryably: the transaction must be rolled back");
    }
    if (rollback_only_) return "the transaction was marked rollback-only";
    return {};
  }

  // The first claim of the try that was superseded, or null.
  const Entry* superseded() const noexcept {
    for (const Entry& e : entries_) {
      if (e.state == State::superseded) return &e;
    }
    return nullptr;
  }

  // The retryable StoreError that ends a try with a superseded claim (call only when
  // superseded() is set); `who` names the thrower, e.g. "idem::mysql".
  StoreError superseded_error(std::string_view who) const {
    const Entry& e = *superseded();
    return StoreError(fmt::format("{}: the record-last claim on {}/{} was superseded: another "
                                  "request for the key finished first; the transaction must "
                                  "roll back and run again, and will replay that result",
                                  who, e.key.biz_type(), detail::printable(e.key.id())),
                      true);
  }

  const Key* first_key() const noexcept {
    return entries_.empty() ? nullptr : &entries_.front().key;
  }
  Observer* observer() const noexcept { return observer_; }
  const std::string& context() const noexcept { return context_; }

 private:
  std::vector<Entry> entries_;
  Observer* observer_ = nullptr;
  std::string context_;
  bool rollback_only_ = false;
  std::optional<Deferred> deferred_;  // dropped unsent when the try rolls back
  std::vector<std::function<void()>> after_commit_;
  std::vector<std::function<void()>> after_rollback_;
  bool holding_ = false;
  std::deque<HeldEvents> held_;  // one per observer; a deque: the guards keep pointers
};

// with_transaction registers the ledger of the try it runs on a handle (a MYSQL*, a
// sqlite3*) for the length of the try, so that a store bound to the raw handle inside the body
// (store.bind(db)) notes its claims in that same ledger. Per thread: a try runs on one thread.
class LedgerScope {
 public:
  LedgerScope(const void* handle, ClaimLedger& ledger) : handle_(handle) {
    scopes().push_back({handle, &ledger});
  }
  ~LedgerScope() {
    auto& all = scopes();
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (it->handle == handle_) {
        all.erase(std::next(it).base());
        break;
      }
    }
  }
  LedgerScope(const LedgerScope&) = delete;
  LedgerScope& operator=(const LedgerScope&) = delete;

  // The ledger of the try running on `handle` on this thread, or null.
  static ClaimLedger* find(const void* handle) noexcept {
    const auto& all = scopes();
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (it->handle == handle) return it->ledger;
    }
    return nullptr;
  }

 private:
  struct Scope {
    const void* handle;
    ClaimLedger* ledger;
  };
  static std::vector<Scope>& scopes() noexcept {
    thread_local std::vector<Scope> all;
    return all;
  }
  const void* handle_;
};

// The ledger a store bound to `handle` notes its claims in: that of the with_transaction try
// running on the handle, if any, else the bound store's own (so: bind once per transaction).
inline ClaimLedger* ledger_for(const void* handle, ClaimLedger& own) noexcept {
  ClaimLedger* running = LedgerScope::find(handle);
  return running != nullptr ? running : &own;
}

}  // namespace idem::same_transaction
