// Recovery points (idem/attempt.hpp) on MariaDB: record_step on the standalone store, racing
// steps of one claim, a local step committed (or rolled back) with the business row of its
// transaction, a record-last claim's steps written with its finished record, and a worker
// process killed mid-business whose successor resumes with after_crash and the kept steps.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "../support/mysql_server.hpp"
#include "../support/session_status.hpp"
#include "../support/threads.hpp"

using namespace std::chrono_literals;
using idem_test::BusinessTable;
using idem_test::Errors;
using idem_test::Table;

namespace {

using Attempt = idem::Attempt<idem::mysql::Store>;

const idem::Options long_lease{.lease = 60s, .ttl = 1h};

nlohmann::json points(const idem::Record& r) {
  return nlohmann::json::parse(r.recovery_points.empty() ? "{}" : r.recovery_points);
}

// Runs fn in a child process and returns its pid. The child leaves with _exit(fn()): it never
// returns into Catch2 and never touches the parent's connections (it opens its own).
template <class F>
pid_t spawn(F&& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 70;
    try {
      code = fn();
    } catch (...) {
      code = 71;
    }
    ::_exit(code);
  }
  return pid;
}

// The exit code of a child, or 128 + the signal that ended it.
int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("record_step keeps each step's first result with the claim, while it holds") {
  Table t;
  const idem::Key key{"ORDER", "steps-standalone"};
  const auto claim = t.store.claim(key, "fp", long_lease);
  const auto& ticket = claim.record.ticket;

  const std::string one = t.store.record_step(key, ticket, "reserve", R"({"hold":"h-1"})");
  CHECK(nlohmann::json::parse(one) == nlohmann::json{{"reserve", {{"hold", "h-1"}}}});
  const auto after_one = t.store.find(key);
  CHECK(after_one->recovery_points == one);
  CHECK(after_one->updated_at >= claim.record.updated_at);
  // The first result of a step stays; another step joins it.
  CHECK(t.store.record_step(key, ticket, "reserve", R"({"hold":"h-2"})") == one);
  const std::string two = t.store.record_step(key, ticket, "charge", R"("ch_1")");
  CHECK(points(*t.store.find(key)) ==
        nlohmann::json{{"reserve", {{"hold", "h-1"}}}, {"charge", "ch_1"}});
  CHECK(t.store.find(key)->recovery_points == two);
  // Bad input is refused before anything is sent; a foreign ticket holds nothing.
  CHECK_THROWS_AS(t.store.record_step(key, ticket, "bad name", "1"), idem::InvalidArgument);
  CHECK_THROWS_AS(t.store.record_step(key, ticket, "ship", "not json"), idem::InvalidArgument);
  CHECK_THROWS_AS(
      t.store.record_step(key, idem::Ticket{ticket.fence + 1, ticket.owner}, "ship", "1"),
      idem::LeaseLost);
  CHECK_THROWS_AS(t.store.record_step(idem::Key{"ORDER", "none"}, ticket, "ship", "1"),
                  idem::LeaseLost);
  // Once finished, the claim keeps its points and takes no more.
  t.store.complete(key, ticket, R"({"ok":1})");
  CHECK_THROWS_AS(t.store.record_step(key, ticket, "ship", "1"), idem::LeaseLost);
  CHECK(t.store.find(key)->recovery_points == two);
}

TEST_CASE("16 threads record 16 steps of one claim at once: every step is kept") {
  Table t(16);
  constexpr int threads = 16;
  for (int round = 0; round < 5; ++round) {
    const idem::Key key{"ORDER", "steps-race-" + std::to_string(round)};
    const auto claim = t.store.claim(key, "fp", long_lease);
    Errors errors;
    idem_test::run_threads(threads, [&](int i) {
      const std::string step = "step-" + std::to_string(i);
      try {
        const auto answer = nlohmann::json::parse(
            t.store.record_step(key, claim.record.ticket, step, std::to_string(i)));
        if (answer.value(step, -1) != i) errors.add("the answer lacks " + step);
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    });
    INFO(errors.first());
    REQUIRE(errors.size() == 0);
    const auto kept = points(*t.store.find(key));
    REQUIRE(kept.size() == threads);  // no step's write was lost to another's
    for (int i = 0; i < threads; ++i)
      CHECK(kept.value("step-" + std::to_string(i), -1) == i);
  }
}

TEST_CASE("a local step commits with its business row, or neither stays") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::Key key{"ORDER", "steps-local"};
  int ran = 0;

  // The body throws after its step: the transaction, and with it the step's row and its
  // recovery point, roll back; the claim fails retryably.
  CHECK_THROWS_AS(idem::run_once(t.store, key, "fp",
                                 [&](Attempt& attempt) -> int {
                                   idem::mysql::with_transaction(
                                       *t.pool, [&](idem::mysql::Connection& c) -> int {
                                         auto tx = t.store.bind(c);
                                         attempt.step(tx, "reserve", [&] {
                                           ++ran;
                                           biz.insert(c, key.id());
                                           return std::string("h-1");
                                         });
                                         throw std::runtime_error("after the step");
                                       });
                                   return 0;
                                 }),
                  std::runtime_error);
  CHECK(ran == 1);
  CHECK(biz.rows() == 0);
  CHECK(t.store.find(key)->recovery_points.empty());
  CHECK(t.store.find(key)->status == idem::Status::failed);

  // The next attempt runs the step again (nothing was kept) and this time commits both.
  const auto out = idem::run_once(t.store, key, "fp", [&](Attempt& attempt) {
    CHECK(attempt.number() == 2);
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return attempt.step(tx, "reserve", [&] {
        ++ran;
        biz.insert(c, key.id());
        return std::string("h-2");
      });
    });
  });
  REQUIRE(out);
  CHECK(out.value() == "h-2");
  CHECK(ran == 2);
  CHECK(biz.rows() == 1);
  CHECK(points(*t.store.find(key)) == nlohmann::json{{"reserve", "h-2"}});

  // A claim taken over from a dead worker finds the committed step and does not run it again.
  const idem::Key crashed{"ORDER", "steps-local-crashed"};
  const auto first = t.store.claim(crashed, "fp", {.lease = 200ms, .ttl = 1h});
  idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
    biz.insert(c, crashed.id());
    return t.store.bind(c).record_step(crashed, first.record.ticket, "reserve", R"("h-3")");
  });
  std::this_thread::sleep_for(300ms);  // the worker "died": its lease runs out
  const auto resumed = idem::run_once(t.store, crashed, "fp", [&](Attempt& attempt) {
    CHECK(attempt.after_crash());
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return attempt.step(tx, "reserve", [&] {
        ++ran;
        biz.insert(c, crashed.id());
        return std::string("again");
      });
    });
  });
  REQUIRE(resumed);
  CHECK(resumed.value() == "h-3");
  CHECK(ran == 2);
  CHECK(biz.rows("trade_no = 'steps-local-crashed'") == 1);
}

TEST_CASE("a local step rolled back with its transaction runs again, and a later step reads") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::Key key{"ORDER", "steps-local-rolled-back"};
  int reserved = 0, tries = 0, shipped = 0;
  const auto out = idem::run_once(t.store, key, "fp", [&](Attempt& attempt) {
    // The first try's step writes its row and its recovery point, then the server rolls the
    // try back (a deadlock, say): with_transaction runs the body again, and the step with it,
    // although this attempt has seen its own point written.
    const auto hold =
        idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) -> std::string {
          auto tx = t.store.bind(c);
          auto h = attempt.step(tx, "reserve", [&] {
            ++reserved;
            biz.insert(c, key.id());
            return "h-" + std::to_string(reserved);
          });
          if (++tries == 1) throw idem::StoreError("deadlock (simulated)", true);
          return h;
        });
    // A step in a transaction the caller rolls back by hand, then another step: the second
    // one's write finds the points unlike this attempt believes and reads them again.
    try {
      idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) -> int {
        auto tx = t.store.bind(c);
        attempt.step(tx, "ship", [&] { return ++shipped; });
        throw std::runtime_error("the caller gives up on this transaction");
      });
    } catch (const std::runtime_error&) {
    }
    const auto paid = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return attempt.step(tx, "paid", [] { return true; });
    });
    // And the rolled-back step runs again.
    const auto ship = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return attempt.step(tx, "ship", [&] { return ++shipped; });
    });
    // A step this attempt committed answers its result again, without running.
    const auto again = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return attempt.step(tx, "reserve", [&] {
        ++reserved;
        return std::string("again");
      });
    });
    CHECK(again == hold);
    return nlohmann::json{{"hold", hold}, {"paid", paid}, {"ship", ship}};
  });
  REQUIRE(out);
  CHECK(out.value() == nlohmann::json{{"hold", "h-2"}, {"paid", true}, {"ship", 2}});
  CHECK(tries == 2);
  CHECK(reserved == 2);
  CHECK(biz.rows() == 1);
  CHECK(points(*t.store.find(key)) ==
        nlohmann::json{{"reserve", "h-2"}, {"paid", true}, {"ship", 2}});
}

TEST_CASE("a local step of a claim taken over meanwhile is LeaseLost and rolls back") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::Key key{"ORDER", "steps-local-taken-over"};
  int ran = 0;
  CHECK_THROWS_AS(idem::run_once(
                      t.store, key, "fp",
                      [&](Attempt& attempt) {
                        // Another worker takes the record over (the lease ran out) before the
                        // step: its row must not commit.
                        std::this_thread::sleep_for(300ms);
                        const auto other = t.store.claim(key, "fp", {.lease = 30s, .ttl = 1h});
                        REQUIRE(other.verdict == idem::Verdict::acquired);
                        return idem::mysql::with_transaction(
                            *t.pool, [&](idem::mysql::Connection& c) {
                              auto tx = t.store.bind(c);
                              return attempt.step(tx, "reserve", [&] {
                                ++ran;
                                biz.insert(c, key.id());
                                return 1;
                              });
                            });
                      },
                      idem::Options{.lease = 200ms, .ttl = 1h}),
                  idem::LeaseLost);
  CHECK(biz.rows() == 0);
  CHECK(t.store.find(key)->recovery_points.empty());
}

TEST_CASE("a bound claim's steps are written with its record, in either way of claiming") {
  for (const auto how : {idem::BoundClaim::record_last, idem::BoundClaim::claim_first}) {
    Table t(8, {.bound_claim = how});
    BusinessTable biz(t.pool);
    const idem::Key key{"ORDER", "steps-bound"};
    const auto out = idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      return idem::run_once(tx, key, "fp", [&](idem::Attempt<idem::mysql::BoundStore>& a) {
        const auto hold = a.step("reserve", [&] {
          biz.insert(c, key.id());
          return std::string("h-1");
        });
        return hold + "/" + a.step("charge", [] { return std::string("ch_1"); });
      });
    });
    REQUIRE(out);
    CHECK(out.value() == "h-1/ch_1");
    const auto stored = t.store.find(key);
    REQUIRE(stored);
    CHECK(stored->status == idem::Status::succeeded);
    CHECK(points(*stored) == nlohmann::json{{"reserve", "h-1"}, {"charge", "ch_1"}});
    CHECK(biz.rows() == 1);
  }
}

TEST_CASE("a worker killed mid-business is resumed after_crash with the steps it kept") {
  Table t;
  const idem::Key key{"ORDER", "steps-killed"};
  int ready[2];
  REQUIRE(::pipe(ready) == 0);

  // The worker: claims, finishes two steps, says so, and is killed in its third.
  const pid_t worker = spawn([&]() -> int {
    ::close(ready[0]);
    auto pool = std::make_shared<idem::mysql::Pool>(idem_test::server(),
                                                    idem::mysql::PoolParams{.size = 1});
    idem::mysql::Store store{pool, {.table = t.name}};
    const auto out =
        idem::run_once(store, key, "fp",
                       [&](Attempt& attempt) {
                         attempt.step("reserve", [] { return nlohmann::json{{"hold", "h-1"}}; });
                         attempt.step("charge", [] { return std::string("ch_1"); });
                         const char c = 'x';
                         if (::write(ready[1], &c, 1) != 1) ::_exit(72);
                         for (;;)
                           ::pause();  // the "ship" step that never ends
                         return 0;
                       },
                       {.lease = 1s, .ttl = 1h});
    return out ? 73 : 74;
  });
  REQUIRE(worker > 0);
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  REQUIRE(::kill(worker, SIGKILL) == 0);
  REQUIRE(wait_exit(worker) == 128 + SIGKILL);

  const auto left = t.store.find(key);
  REQUIRE(left);
  CHECK(left->status == idem::Status::processing);
  CHECK(points(*left).size() == 2);
  // Before the lease runs out the dead worker's claim still holds.
  CHECK(t.store.claim(key, "fp", long_lease).verdict == idem::Verdict::in_progress);
  std::this_thread::sleep_for(1100ms);

  int reran = 0;
  bool after_crash = false;
  const auto out = idem::run_once(
      t.store, key, "fp",
      [&](Attempt& attempt) {
        after_crash = attempt.after_crash();
        CHECK(attempt.number() == 2);
        const auto hold = attempt.step("reserve", [&] {
          ++reran;
          return nlohmann::json{{"hold", "h-again"}};
        });
        const auto charge = attempt.step("charge", [&] {
          ++reran;
          return std::string("ch_again");
        });
        const auto ship = attempt.step("ship", [] { return std::string("sh_1"); });
        return hold["hold"].get<std::string>() + "/" + charge + "/" + ship;
      },
      long_lease);
  REQUIRE(out);
  CHECK(after_crash);
  CHECK(reran == 0);  // the kept steps did not run again
  CHECK(out.value() == "h-1/ch_1/sh_1");
  const auto done = t.store.find(key);
  CHECK(done->status == idem::Status::succeeded);
  CHECK(done->ticket.fence == 2);
  CHECK(points(*done) ==
        nlohmann::json{{"reserve", {{"hold", "h-1"}}}, {"charge", "ch_1"}, {"ship", "sh_1"}});
  // A duplicate now replays.
  CHECK(t.store.claim(key, "fp", long_lease).verdict == idem::Verdict::replayed);
}

namespace {

// Counts the committed events of the guards it observes.
struct Commits final : idem::Observer {
  std::atomic<int> committed{0};
  void on_event(const idem::Event& e) noexcept override {
    if (e.kind == idem::EventKind::committed) ++committed;
  }
};

}  // namespace

// In same-transaction mode the record commits with the business's writes already.
template <class A, class B>
concept CanComplete = requires(A& a, B& b) {
  a.complete(b, 1);
};
static_assert(!CanComplete<idem::Attempt<idem::mysql::BoundStore>, idem::mysql::BoundStore>);
static_assert(CanComplete<Attempt, idem::mysql::BoundStore>);

TEST_CASE("Attempt::complete finishes the action in the business's last transaction") {
  Table t;
  BusinessTable biz(t.pool);
  Commits commits;
  const idem::Options options{.lease = 60s, .ttl = 1h, .observer = &commits};
  const idem::Key key{"ORDER", "steps-complete"};
  int reserved = 0;
  auto business = [&](Attempt& attempt) {
    const auto hold = attempt.step("reserve", [&] {
      ++reserved;
      return std::string("h-1");
    });
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      biz.insert(c, key.id());
      return attempt.complete(tx, nlohmann::json{{"hold", hold}, {"paid", true}});
    });
  };
  const auto out = idem::run_once(t.store, key, "fp", business, options);
  REQUIRE(out);
  CHECK(out.verdict() == idem::Verdict::acquired);
  CHECK(out.value() == nlohmann::json{{"hold", "h-1"}, {"paid", true}});
  const auto stored = t.store.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::succeeded);
  CHECK(nlohmann::json::parse(stored->snapshot) == out.value());
  CHECK(points(*stored) == nlohmann::json{{"reserve", "h-1"}});
  CHECK(biz.rows() == 1);
  // Reported once; a second completion would have met a finished record and been LeaseLost.
  CHECK(commits.committed == 1);

  // A duplicate replays the response, and runs nothing.
  const auto again = idem::run_once(t.store, key, "fp", business, options);
  REQUIRE(again);
  CHECK(again.verdict() == idem::Verdict::replayed);
  CHECK(again.value() == out.value());
  CHECK(reserved == 1);
  CHECK(biz.rows() == 1);
}

TEST_CASE("Attempt::complete in a transaction that rolls back records nothing") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::Key key{"ORDER", "steps-complete-rolled-back"};
  int tries = 0;

  // The body throws after the completion: the business row and the completion roll back, and
  // the claim fails retryably.
  CHECK_THROWS_AS(idem::run_once(t.store, key, "fp",
                                 [&](Attempt& attempt) {
                                   return idem::mysql::with_transaction(
                                       *t.pool, [&](idem::mysql::Connection& c) -> int {
                                         auto tx = t.store.bind(c);
                                         biz.insert(c, key.id());
                                         attempt.complete(tx, 1);
                                         throw std::runtime_error("after the completion");
                                       });
                                 }),
                  std::runtime_error);
  CHECK(biz.rows() == 0);
  CHECK(t.store.find(key)->status == idem::Status::failed);
  CHECK(t.store.find(key)->retryable);

  // The server rolls the first try back (a deadlock, say); with_transaction runs the body
  // again, whose completion is the one that commits.
  const auto out = idem::run_once(t.store, key, "fp", [&](Attempt& attempt) {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      auto tx = t.store.bind(c);
      biz.insert(c, key.id());
      const int n = attempt.complete(tx, ++tries);
      if (tries == 1) throw idem::StoreError("deadlock (simulated)", true);
      return n;
    });
  });
  REQUIRE(out);
  CHECK(out.value() == 2);
  CHECK(biz.rows() == 1);
  CHECK(t.store.find(key)->snapshot == "2");

  // The caller catches the failed transaction and returns the response anyway: that success
  // did not commit, so it is not recorded (UsageError); the claim fails retryably.
  const idem::Key caught{"ORDER", "steps-complete-caught"};
  CHECK_THROWS_AS(idem::run_once(t.store, caught, "fp",
                                 [&](Attempt& attempt) {
                                   try {
                                     idem::mysql::with_transaction(
                                         *t.pool, [&](idem::mysql::Connection& c) -> int {
                                           auto tx = t.store.bind(c);
                                           biz.insert(c, caught.id());
                                           attempt.complete(tx, 7);
                                           throw std::runtime_error("rolled back");
                                         });
                                   } catch (const std::runtime_error&) {
                                   }
                                   return 7;
                                 }),
                  idem::UsageError);
  CHECK(t.store.find(caught)->status == idem::Status::failed);
  CHECK(t.store.find(caught)->retryable);
  CHECK(biz.rows("trade_no = 'steps-complete-caught'") == 0);

  // run_once inside the transaction it completes in: the business returns before that
  // transaction's COMMIT, so nothing may be recorded as a success yet (UsageError, which
  // rolls the transaction back).
  const idem::Key nested{"ORDER", "steps-complete-nested"};
  CHECK_THROWS_AS(idem::mysql::with_transaction(*t.pool,
                                                [&](idem::mysql::Connection& c) {
                                                  auto tx = t.store.bind(c);
                                                  return idem::run_once(
                                                      t.store, nested, "fp", [&](Attempt& attempt) {
                                                        biz.insert(c, nested.id());
                                                        return attempt.complete(tx, 5);
                                                      });
                                                }),
                  idem::UsageError);
  CHECK(t.store.find(nested)->status == idem::Status::failed);
  CHECK(t.store.find(nested)->retryable);
  CHECK(biz.rows("trade_no = 'steps-complete-nested'") == 0);

  // The business throws after its completion committed: the record stays succeeded (the
  // guard has nothing to undo), and the exception propagates.
  const idem::Key thrown{"ORDER", "steps-complete-then-throw"};
  CHECK_THROWS_AS(idem::run_once(t.store, thrown, "fp",
                                 [&](Attempt& attempt) -> int {
                                   idem::mysql::with_transaction(*t.pool,
                                                                 [&](idem::mysql::Connection& c) {
                                                                   auto tx = t.store.bind(c);
                                                                   return attempt.complete(tx, 9);
                                                                 });
                                   throw std::runtime_error("after the commit");
                                 }),
                  std::runtime_error);
  CHECK(t.store.find(thrown)->status == idem::Status::succeeded);
  CHECK(t.store.find(thrown)->snapshot == "9");
}

TEST_CASE("Attempt::complete in a transaction of the caller's own is confirmed by one read") {
  Table t;
  BusinessTable biz(t.pool);
  Commits commits;
  const idem::Options options{.lease = 60s, .ttl = 1h, .observer = &commits};
  // The business commits (or rolls back) its own transaction and returns `response`.
  auto run = [&](const idem::Key& key, bool commit, const std::string& response) {
    return idem::run_once(
        t.store, key, "fp",
        [&](Attempt& attempt) {
          auto c = t.pool->acquire();
          c->query("START TRANSACTION");
          auto tx = t.store.bind(c->native());  // the service's own handle
          biz.insert(*c, key.id());
          attempt.complete(tx, std::string("done"));
          c->query(commit ? "COMMIT" : "ROLLBACK");
          return response;
        },
        options);
  };
  const idem::Key committed{"ORDER", "steps-own-committed"};
  const auto out = run(committed, true, "done");
  REQUIRE(out);
  CHECK(out.value() == "done");
  CHECK(t.store.find(committed)->status == idem::Status::succeeded);
  CHECK(t.store.find(committed)->snapshot == R"("done")");
  CHECK(biz.rows("trade_no = 'steps-own-committed'") == 1);
  CHECK(commits.committed == 1);

  // Rolled back: the success is not recorded, the claim fails retryably.
  const idem::Key rolled_back{"ORDER", "steps-own-rolled-back"};
  CHECK_THROWS_AS(run(rolled_back, false, "done"), idem::UsageError);
  CHECK(t.store.find(rolled_back)->status == idem::Status::failed);
  CHECK(t.store.find(rolled_back)->retryable);
  CHECK(biz.rows("trade_no = 'steps-own-rolled-back'") == 0);

  // Committed, and another response returned: UsageError; the completed one stands.
  const idem::Key other{"ORDER", "steps-own-other"};
  CHECK_THROWS_AS(run(other, true, "something else"), idem::UsageError);
  CHECK(t.store.find(other)->status == idem::Status::succeeded);
  CHECK(t.store.find(other)->snapshot == R"("done")");
  CHECK(commits.committed == 2);
}

TEST_CASE("Attempt::complete of a claim taken over is LeaseLost and commits nothing") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::Key key{"ORDER", "steps-complete-taken-over"};
  CHECK_THROWS_AS(idem::run_once(
                      t.store, key, "fp",
                      [&](Attempt& attempt) {
                        std::this_thread::sleep_for(300ms);
                        const auto other = t.store.claim(key, "fp", {.lease = 30s, .ttl = 1h});
                        REQUIRE(other.verdict == idem::Verdict::acquired);
                        return idem::mysql::with_transaction(*t.pool,
                                                             [&](idem::mysql::Connection& c) {
                                                               auto tx = t.store.bind(c);
                                                               biz.insert(c, key.id());
                                                               return attempt.complete(tx, 1);
                                                             });
                      },
                      idem::Options{.lease = 200ms, .ttl = 1h}),
                  idem::LeaseLost);
  CHECK(biz.rows() == 0);
  CHECK(t.store.find(key)->status == idem::Status::processing);
  CHECK(t.store.find(key)->ticket.fence == 2);
}

TEST_CASE("a business that returns another response than it completed with is UsageError") {
  Table t;
  const idem::Key key{"ORDER", "steps-complete-other"};
  CHECK_THROWS_AS(idem::run_once(t.store, key, "fp",
                                 [&](Attempt& attempt) {
                                   idem::mysql::with_transaction(*t.pool,
                                                                 [&](idem::mysql::Connection& c) {
                                                                   auto tx = t.store.bind(c);
                                                                   return attempt.complete(tx, 1);
                                                                 });
                                   return 2;
                                 }),
                  idem::UsageError);
  // The completion committed; duplicates replay it.
  CHECK(t.store.find(key)->status == idem::Status::succeeded);
  CHECK(t.store.find(key)->snapshot == "1");
}

TEST_CASE("8 threads run 60 actions that complete in their last transaction: each runs once") {
  Table t(16);
  BusinessTable biz(t.pool);
  constexpr int threads = 8;
  constexpr int actions = 60;
  std::atomic<int> ran{0};
  Errors errors;
  idem_test::run_threads(threads, [&](int i) {
    for (int n = 0; n < actions; ++n) {
      // Every thread takes every action, starting at its own offset: most claims meet another
      // thread's claim, in progress or finished.
      const std::string id = "steps-complete-race-" + std::to_string((n + i * 7) % actions);
      try {
        const auto out = idem::run_once(
            t.store, idem::Key{"ORDER", id}, "fp",
            [&](Attempt& attempt) {
              ++ran;
              const auto charge = attempt.step("charge", [&] { return id; });
              return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
                auto tx = t.store.bind(c);
                biz.insert(c, id);
                return attempt.complete(tx, charge);
              });
            },
            long_lease);
        if (out && out.value() != id) errors.add("another action's response for " + id);
      } catch (const std::exception& e) {
        errors.add(e.what());
      }
    }
  });
  INFO(errors.first());
  REQUIRE(errors.size() == 0);
  CHECK(ran == actions);
  CHECK(biz.rows() == actions);
  CHECK(biz.max_per_key() == 1);
  CHECK(t.count("status = 1") == actions);
}

TEST_CASE("a local step's point and the completion travel with their transaction's COMMIT") {
  Table t;
  BusinessTable biz(t.pool);
  const auto business = idem_test::make_pool(1);  // the service's: the counters' connection
  auto questions = [&] {
    return idem::mysql::with_transaction(*business, [&](idem::mysql::Connection& c) {
      return idem_test::session_count(c, "Questions");
    });
  };
  auto pay = [&](const std::string& id) {
    return idem::run_once(t.store, idem::Key{"ORDER", id}, "fp", [&](Attempt& attempt) {
      const auto hold = idem::mysql::with_transaction(*business, [&](idem::mysql::Connection& c) {
        auto tx = t.store.bind(c);
        return attempt.step(tx, "reserve", [&] {
          biz.insert(c, id);
          return std::string("h-") + id;
        });
      });
      return idem::mysql::with_transaction(*business, [&](idem::mysql::Connection& c) {
        auto tx = t.store.bind(c);
        biz.insert(c, id);
        return attempt.complete(tx, hold);
      });
    });
  };
  REQUIRE(pay("warm-up"));  // autocommit goes off once, on the connection's first transaction
  const long long before = questions();
  const auto out = pay("fresh");
  // Each transaction: the business INSERT, and the guarded UPDATE with the COMMIT in one
  // statement; then the SHOW of the next questions() and its COMMIT.
  CHECK(questions() - before == 2 + 2 + 2);
  REQUIRE(out);
  CHECK(out.value() == "h-fresh");
  const auto stored = t.store.find(idem::Key{"ORDER", "fresh"});
  CHECK(stored->status == idem::Status::succeeded);
  CHECK(points(*stored) == nlohmann::json{{"reserve", "h-fresh"}});
  CHECK(biz.rows("trade_no = 'fresh'") == 2);
}

TEST_CASE("a step's point refused at the COMMIT runs the try again, which reads the points") {
  Table t;
  BusinessTable biz(t.pool);
  const idem::Key key{"ORDER", "steps-refused-at-commit"};
  int ran = 0, tries = 0;
  // Between the step and its COMMIT another thread of the worker keeps a step of the same
  // claim: the point waiting for the COMMIT no longer matches, and the try runs again.
  const auto out = idem::run_once(t.store, key, "fp", [&](Attempt& attempt) {
    return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
      ++tries;
      auto tx = t.store.bind(c);
      const auto hold = attempt.step(tx, "reserve", [&] {
        ++ran;
        biz.insert(c, key.id());
        return ran;
      });
      t.store.record_step(key, attempt.claim().ticket, "notify", "true");
      return hold;
    });
  });
  REQUIRE(out);
  CHECK(tries == 2);
  CHECK(ran == 2);
  CHECK(out.value() == 2);
  CHECK(biz.rows() == 1);
  CHECK(points(*t.store.find(key)) == nlohmann::json{{"notify", true}, {"reserve", 2}});

  // Taken over between the step and its COMMIT: refused, the try runs again and its read
  // finds the claim lost: LeaseLost, and nothing of either try committed.
  const idem::Key lost{"ORDER", "steps-lost-at-commit"};
  CHECK_THROWS_AS(
      idem::run_once(
          t.store, lost, "fp",
          [&](Attempt& attempt) {
            return idem::mysql::with_transaction(*t.pool, [&](idem::mysql::Connection& c) {
              auto tx = t.store.bind(c);
              const int r = attempt.step(tx, "reserve", [&] {
                biz.insert(c, lost.id());
                return 1;
              });
              if (t.store.find(lost)->ticket == attempt.claim().ticket) {
                std::this_thread::sleep_for(300ms);
                REQUIRE(t.store.claim(lost, "fp", long_lease).verdict == idem::Verdict::acquired);
              }
              return r;
            });
          },
          idem::Options{.lease = 200ms, .ttl = 1h}),
      idem::LeaseLost);
  CHECK(biz.rows("trade_no = 'steps-lost-at-commit'") == 0);
  CHECK(t.store.find(lost)->recovery_points.empty());
}
