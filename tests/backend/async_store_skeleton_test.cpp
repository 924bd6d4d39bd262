// idem::backend::AsyncStoreSkeleton's repair, record_step, list and claim_batch, driven through a
// scripted backend (no server): the steps of idem/backend/steps.hpp run by coroutine calls, a
// lost write read again, a lost reply recognised on the next try, the retry judging of the
// skeleton's other operations (transient retried, fatal not, a bounded number of tries), and a
// batch's chunks, its failure and its cancellation.
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/backend/async_pool.hpp>
#include <idem/backend/async_store_skeleton.hpp>
#include <idem/idem.hpp>

#include "../support/loop.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;
using idem::backend::FailureKind;

namespace {

struct ScriptedConnection {
  unsigned long id() const noexcept { return 1; }
};

struct ScriptedDriver {
  using Connection = ::ScriptedConnection;
  net::awaitable<std::unique_ptr<Connection>> open() { co_return std::make_unique<Connection>(); }
  net::awaitable<void> ready(std::unique_ptr<Connection>&, idem::Duration,
                             idem::backend::ConnectionPurpose) {
    co_return;
  }
  bool reusable(const Connection&) noexcept { return true; }
  std::string where() const { return ""; }
};

// The rows, and the script of what goes wrong with the next statements.
struct ScriptedTable {
  idem::ManualClock clock;
  std::map<idem::Key, idem::Record> rows;
  std::vector<std::string> statements;  // as sent, in order
  // Per statement name, the failures of its next sends: transient and fatal ones instead of
  // the statement, reply_lost after it ran.
  std::map<std::string, std::vector<FailureKind>> failures;
  // Runs before the next write: another writer moves the row on.
  std::function<void()> before_write;
  // claim_chunk: the width of each statement; those wider than chunk_fail_above fail
  // (transient); the statement number hang_chunk (from 1) never answers after its rows landed.
  std::vector<std::size_t> chunk_sizes;
  std::size_t chunk_fail_above = 0;
  int fail_chunk = 0;              // the statement number fail_chunk fails (fatal) before any write
  int fail_after_write_chunk = 0;  // ... writes its rows, then fails (fatal)
  int hang_chunk = 0;
  int settled = 0;  // Ops::settled calls: waits for a connection's statement to end

  void seed(const idem::Key& key) {
    rows.emplace(key, idem::backend::claim_record(key, "crashed-owner", "fp", clock.now(),
                                                  idem::Options{.lease = 1s}));
  }
};

std::string_view scripted_name_of(FailureKind k) {
  switch (k) {
    case FailureKind::fatal:
      return "fatal";
    case FailureKind::transient:
      return "transient";
    case FailureKind::reply_lost:
      return "reply_lost";
  }
  return "fatal";
}

struct ScriptedOps {
  using Connection = ScriptedConnection;
  static constexpr std::size_t max_batch_rows = 4;
  ScriptedTable* t;

  // A batch statement: writes the keys that have no row, answers every key's row (as
  // PostgreSQL's claim_batch), and settles each as the real stores do.
  net::awaitable<std::vector<idem::ClaimResult>> claim_chunk(
      Connection& c, std::span<const idem::ClaimRequest* const> requests,
      std::span<const std::string> tokens, const idem::Options& o) const {
    if (tokens.size() != requests.size()) throw std::logic_error("a token per request");
    t->chunk_sizes.push_back(requests.size());
    if (t->chunk_fail_above != 0 && requests.size() > t->chunk_fail_above) {
      throw idem::StoreError("transient", true);
    }
    if (static_cast<int>(t->chunk_sizes.size()) == t->fail_chunk) {
      throw idem::StoreError("fatal", false);
    }
    auto rows = scripted("claim_chunk", [&] {
      std::unordered_map<idem::Key, idem::backend::RecordRead> found;
      for (std::size_t i = 0; i < requests.size(); ++i) {
        const idem::Key& key = requests[i]->key;
        const auto it =
            t->rows
                .try_emplace(key, idem::backend::claim_record(
                                      key, tokens[i], requests[i]->fingerprint, t->clock.now(), o))
                .first;
        found.emplace(key, idem::backend::RecordRead{it->second, t->clock.now()});
      }
      return found;
    });
    if (static_cast<int>(t->chunk_sizes.size()) == t->fail_after_write_chunk) {
      throw idem::StoreError("fatal", false);
    }
    if (static_cast<int>(t->chunk_sizes.size()) == t->hang_chunk) {
      co_await idem::async::sleep_for(std::chrono::hours(1));  // until cancelled
    }
    auto answers = idem::backend::batch_answers(requests, rows);
    co_return co_await idem::async::detail::settle_batch("scripted", *this, c, requests, tokens, o,
                                                         answers);
  }

  net::awaitable<std::optional<idem::backend::RecordRead>> read(Connection&, const idem::Key& key,
                                                                bool) const {
    co_return scripted("read", [&]() -> std::optional<idem::backend::RecordRead> {
      const auto it = t->rows.find(key);
      if (it == t->rows.end()) return std::nullopt;
      return idem::backend::RecordRead{it->second, t->clock.now()};
    });
  }

  // The claim and its finish, for a whole run_once on this store.
  net::awaitable<std::optional<idem::Record>> insert(Connection&, const idem::Key& key,
                                                     std::string_view fp, const idem::Options& o,
                                                     const std::string& token, bool) const {
    co_return scripted("insert", [&]() -> std::optional<idem::Record> {
      if (t->rows.contains(key)) return std::nullopt;
      return t->rows.emplace(key, idem::backend::claim_record(key, token, fp, t->clock.now(), o))
          .first->second;
    });
  }
  net::awaitable<bool> write_takeover(Connection&, idem::backend::Decision,
                                      const idem::Record& next, const idem::Ticket& read) const {
    co_return scripted("write_takeover", [&] {
      auto& row = t->rows.at(next.key);
      if (row.ticket != read) return false;
      row = next;
      return true;
    });
  }
  net::awaitable<bool> finish(Connection&, const idem::Key& key, const idem::Ticket& ticket,
                              std::string_view snapshot, idem::Status to, bool retryable) const {
    co_return scripted("finish", [&] {
      auto& row = t->rows.at(key);
      if (!idem::backend::holds(row, ticket)) return false;
      row = idem::backend::finished(row, to, snapshot, retryable, t->clock.now());
      return true;
    });
  }
  net::awaitable<std::size_t> purge(Connection&, std::size_t) const { co_return 0; }
  net::awaitable<std::size_t> release(Connection&, std::size_t) const { co_return 0; }
  net::awaitable<bool> settled(Connection&, unsigned long) const {
    ++t->settled;
    co_return true;
  }

  // Guarded as sql_guard::repair_holds: the fence and the owner read.
  net::awaitable<bool> write_repair(Connection&, const idem::Record& next,
                                    const idem::Ticket& read) const {
    interfere();
    co_return scripted("write_repair", [&] {
      const auto it = t->rows.find(next.key);
      if (it == t->rows.end() || it->second.ticket != read) return false;
      it->second = next;
      return true;
    });
  }

  // Guarded by holds() and by the points read.
  net::awaitable<bool> write_points(Connection&, const idem::Key& key, const idem::Ticket& held,
                                    std::string_view before, std::string_view after) const {
    interfere();
    co_return scripted("write_points", [&] {
      const auto it = t->rows.find(key);
      if (it == t->rows.end() || !idem::backend::holds(it->second, held) ||
          it->second.recovery_points != before) {
        return false;
      }
      it->second.recovery_points = std::string(after);
      it->second.updated_at = t->clock.now();
      return true;
    });
  }

  net::awaitable<std::vector<idem::Record>> list(Connection&, const idem::RecordQuery& q) const {
    co_return scripted("list", [&] {
      std::vector<idem::Record> found;
      for (const auto& [key, r] : t->rows)
        if (idem::backend::matches(q, r, t->clock.now())) found.push_back(r);
      std::sort(found.begin(), found.end(), [&](const idem::Record& a, const idem::Record& b) {
        return idem::backend::listed_before(q, a, b);
      });
      if (found.size() > q.limit)
        found.erase(found.begin() + static_cast<std::ptrdiff_t>(q.limit), found.end());
      return found;
    });
  }

 private:
  template <class F>
  auto scripted(const std::string& name, F run) const -> decltype(run()) {
    t->statements.push_back(name);
    std::optional<FailureKind> failure;
    if (auto& queue = t->failures[name]; !queue.empty()) {
      failure = queue.front();
      queue.erase(queue.begin());
    }
    if (failure && *failure != FailureKind::reply_lost) {
      throw idem::StoreError(std::string(scripted_name_of(*failure)),
                             *failure != FailureKind::fatal);
    }
    auto answer = run();
    if (failure) throw idem::StoreError("reply_lost", true);
    return answer;
  }

  void interfere() const {
    if (auto f = std::exchange(t->before_write, nullptr)) f();
  }
};

struct ScriptedBackend {
  using Connection = ::ScriptedConnection;
  using Pool = idem::backend::AsyncBasicPool<ScriptedDriver>;
  using Ops = ScriptedOps;
  static constexpr std::string_view name = "scripted";
  static FailureKind classify(const idem::StoreError& e) {
    const std::string_view what = e.what();
    if (what == "transient") return FailureKind::transient;
    if (what == "reply_lost") return FailureKind::reply_lost;
    return FailureKind::fatal;
  }
};

class ScriptedStore : public idem::backend::AsyncStoreSkeleton<ScriptedBackend> {
 public:
  explicit ScriptedStore(ScriptedTable& t, idem::RetryPolicy retry = {.max_attempts = 3,
                                                                      .backoff = 1ms,
                                                                      .max_backoff = 2ms})
      : AsyncStoreSkeleton(ScriptedOps{&t}, retry) {
    attach(&pool_);
  }

 private:
  ScriptedBackend::Pool pool_{ScriptedDriver{}, 1, 1s, "scripted pool"};
};

struct Scripted {
  ScriptedTable table;
  ScriptedStore store{table};
  net::io_context io;
  const idem::Key key{"PAY", "s-1"};

  template <class T>
  T run(net::awaitable<T> a) {
    return idem_test::run_on(io, std::move(a));
  }
  idem::Record repair(idem::Repair r) { return run(store.repair(key, r)); }
  std::string step(const idem::Ticket& ticket, std::string_view name, std::string_view result) {
    return run(store.record_step(key, ticket, name, result));
  }
  std::string step_known(const idem::Ticket& ticket, std::string_view name, std::string_view result,
                         std::string_view known) {
    return run(store.record_step(key, ticket, name, result, known));
  }
  std::vector<idem::Record> list(idem::RecordQuery q) { return run(store.list(q)); }
  std::vector<std::string> sent() { return std::exchange(table.statements, {}); }
};

using ScriptedStatements = std::vector<std::string>;

}  // namespace

TEST_CASE_METHOD(Scripted,
                 "async skeleton: a repair reads, checks the fence and writes "
                 "repaired() - a stale fence is refused with the current record") {
  table.seed(key);
  const idem::Record done = repair({.action = idem::RepairAction::complete,
                                    .fence = 1,
                                    .snapshot = R"({"charge":"ch_1"})",
                                    .reason = "the gateway shows ch_1"});
  CHECK(done.status == idem::Status::succeeded);
  CHECK(done.ticket.fence == 2);
  CHECK(table.rows.at(key).ticket == done.ticket);
  CHECK(sent() == ScriptedStatements{"read", "write_repair"});
  try {
    repair({.action = idem::RepairAction::release, .fence = 1, .reason = "late"});
    FAIL("not refused");
  } catch (const idem::RepairRefused& e) {
    REQUIRE(e.current());
    CHECK(e.current()->ticket.fence == 2);
  }
  CHECK(sent() == ScriptedStatements{"read"});
  CHECK_THROWS_AS(repair({.action = idem::RepairAction::release, .fence = 0, .reason = "x"}),
                  idem::InvalidArgument);
  CHECK(sent().empty());  // judged before any statement
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: a repair that lost its write to another writer reads "
                 "again and is refused") {
  table.seed(key);
  table.before_write = [&] {
    auto& row = table.rows.at(key);
    row.ticket = idem::Ticket{2, "another-owner"};
  };
  CHECK_THROWS_AS(repair({.action = idem::RepairAction::release, .fence = 1, .reason = "x"}),
                  idem::RepairRefused);
  CHECK(sent() == ScriptedStatements{"read", "write_repair", "read"});
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: a repair whose reply was lost finds its own write on "
                 "the next try") {
  table.seed(key);
  table.failures["write_repair"] = {FailureKind::reply_lost};
  const idem::Record done =
      repair({.action = idem::RepairAction::mark_unknown, .fence = 1, .reason = "no answer"});
  CHECK(done.status == idem::Status::outcome_unknown);
  CHECK(done.ticket.fence == 2);
  CHECK(sent() == ScriptedStatements{"read", "write_repair", "read"});
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: transient failures are tried again up to the policy's "
                 "tries, fatal ones are not") {
  table.seed(key);
  table.failures["read"] = {FailureKind::transient, FailureKind::transient};
  CHECK(repair({.action = idem::RepairAction::release, .fence = 1, .reason = "x"}).ticket.fence ==
        2);
  CHECK(sent() == ScriptedStatements{"read", "read", "read", "write_repair"});

  table.failures["list"] = {FailureKind::transient, FailureKind::transient, FailureKind::transient};
  CHECK_THROWS_WITH(list({}), Catch::Contains("list gave up after 3 tries"));
  CHECK(sent().size() == 3);

  table.failures["read"] = {FailureKind::fatal};
  CHECK_THROWS_WITH(step(idem::Ticket{}, "reserve", "1"), "fatal");
  CHECK(sent() == ScriptedStatements{"read"});
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: record_step keeps a step while the claim holds, merges "
                 "with a concurrent step of the same claim, and is fenced") {
  table.seed(key);
  const idem::Ticket held = table.rows.at(key).ticket;
  CHECK(step(held, "reserve", R"("hold-1")") == R"({"reserve":"hold-1"})");
  CHECK(sent() == ScriptedStatements{"read", "write_points"});
  // Kept already: no write.
  CHECK(step(held, "reserve", R"("hold-2")") == R"({"reserve":"hold-1"})");
  CHECK(sent() == ScriptedStatements{"read"});
  // Another step of the same claim lands between the read and the write: read again, merged.
  table.before_write = [&] {
    table.rows.at(key).recovery_points = R"({"reserve":"hold-1","charge":7})";
  };
  const std::string points = step(held, "ship", "42");
  CHECK(nlohmann::json::parse(points) ==
        nlohmann::json{{"reserve", "hold-1"}, {"charge", 7}, {"ship", 42}});
  CHECK(table.rows.at(key).recovery_points == points);
  CHECK(sent() == ScriptedStatements{"read", "write_points", "read", "write_points"});
  // A lost reply: the next try finds the step kept.
  table.failures["write_points"] = {FailureKind::reply_lost};
  CHECK(nlohmann::json::parse(step(held, "notify", "true"))["notify"] == true);
  CHECK(sent() == ScriptedStatements{"read", "write_points", "read"});
  // Not held: LeaseLost, nothing written.
  CHECK_THROWS_AS(step(idem::Ticket{held.fence, "someone-else"}, "late", "1"), idem::LeaseLost);
  table.rows.at(key).status = idem::Status::succeeded;
  CHECK_THROWS_AS(step(held, "late", "1"), idem::LeaseLost);
  CHECK(sent() == ScriptedStatements{"read", "read"});
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: record_step with the points the caller knows writes "
                 "at once - a stale guess, or a lost reply, reads") {
  table.seed(key);
  const idem::Ticket held = table.rows.at(key).ticket;
  CHECK(step_known(held, "reserve", "1", "") == R"({"reserve":1})");
  CHECK(sent() == ScriptedStatements{"write_points"});  // one round trip
  // Stale: another step of the same claim was kept meanwhile.
  table.rows.at(key).recovery_points = R"({"reserve":1,"charge":2})";
  CHECK(nlohmann::json::parse(step_known(held, "ship", "3", R"({"reserve":1})")) ==
        nlohmann::json{{"reserve", 1}, {"charge", 2}, {"ship", 3}});
  CHECK(sent() == ScriptedStatements{"write_points", "read", "write_points"});
  // The first write landed but its reply was lost: the next try looks instead of trusting
  // the guess (which would now be stale and write again).
  table.failures["write_points"] = {FailureKind::reply_lost};
  const std::string before = table.rows.at(key).recovery_points;
  CHECK(nlohmann::json::parse(step_known(held, "notify", "true", before))["notify"] == true);
  CHECK(sent() == ScriptedStatements{"write_points", "read"});
  // Not held: the guarded write changes nothing, the read says LeaseLost.
  const std::string now = table.rows.at(key).recovery_points;
  CHECK_THROWS_AS(step_known(idem::Ticket{held.fence, "someone-else"}, "late", "1", now),
                  idem::LeaseLost);
  CHECK(sent() == ScriptedStatements{"write_points", "read"});
  CHECK(table.rows.at(key).recovery_points == now);
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: list answers the backend's rows, a bad query is "
                 "refused before any statement") {
  for (int i = 0; i < 3; ++i) {
    table.seed({"PAY", "l-" + std::to_string(i)});
    table.clock.advance(1s);
  }
  table.failures["list"] = {FailureKind::transient};
  const auto stale = list({.stale = true, .limit = 2});
  REQUIRE(stale.size() == 2);
  CHECK(stale[0].key.id() == "l-0");  // the oldest lease first
  CHECK(sent() == ScriptedStatements{"list", "list"});
  CHECK_THROWS_AS(list({.limit = 0}), idem::InvalidArgument);
  CHECK(sent().empty());
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: an async Attempt's steps each cost one write, the "
                 "points it knows guarding it") {
  static_assert(idem::async::AwaitableStore<ScriptedStore> &&
                idem::async::RecoveryPointAsyncStore<ScriptedStore>);
  auto business = [](idem::async::Attempt<ScriptedStore>& attempt) -> net::awaitable<int> {
    const int a = co_await attempt.step("reserve", [] { return 1; });
    const int b = co_await attempt.step("charge", [] { return 2; });
    co_return a + b;
  };
  const auto out = run(idem::async::run_once(store, key, "fp", business));
  CHECK(out.value() == 3);
  CHECK(sent() == ScriptedStatements{"insert", "write_points", "write_points", "finish"});
  CHECK(nlohmann::json::parse(table.rows.at(key).recovery_points) ==
        nlohmann::json{{"reserve", 1}, {"charge", 2}});
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: claim_batch sends chunks, a failed one again at half its "
                 "width, and answers as one claim after another") {
  static_assert(idem::async::BatchClaimingAsyncStore<ScriptedStore>);
  table.seed({"PAY", "b3"});  // a live claim of another owner
  table.chunk_fail_above = 2;
  std::vector<idem::ClaimRequest> requests;
  for (int i = 0; i < 7; ++i)
    requests.push_back({idem::Key{"PAY", "b" + std::to_string(i)}, "fp"});
  requests.push_back(requests[5]);  // a repeat: claimed after the others, meets their claim
  const auto results = run(idem::async::claim_batch(store, requests));
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < 7; ++i) {
    INFO("request " << i);
    CHECK(results[i].verdict == (i == 3 ? idem::Verdict::in_progress : idem::Verdict::acquired));
    CHECK(results[i].record.key == requests[i].key);
    CHECK(table.rows.at(requests[i].key) == results[i].record);
  }
  CHECK(results.back().verdict == idem::Verdict::in_progress);
  // 4 fails, 2, then 4 fails, 2, then 3 fails, 2, 1 (what is left).
  CHECK(table.chunk_sizes == std::vector<std::size_t>{4, 2, 4, 2, 3, 2, 1});
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: a batch that fails midway releases the claims it made "
                 "before it completes") {
  std::vector<idem::ClaimRequest> requests;
  for (int i = 0; i < 6; ++i)
    requests.push_back({idem::Key{"PAY", "f" + std::to_string(i)}, "fp"});
  table.fail_chunk = 2;  // f0-f3 are claimed, then f4 and f5 fail before any write
  CHECK_THROWS_WITH(run(idem::async::claim_batch(store, requests)), "fatal");
  for (int i = 0; i < 4; ++i) {
    INFO("f" << i);
    const idem::Record& r = table.rows.at(requests[static_cast<std::size_t>(i)].key);
    CHECK(r.status == idem::Status::failed);
    CHECK(r.retryable);
    CHECK(r.snapshot.find("idem.abandoned") != std::string::npos);
  }
  CHECK_FALSE(table.rows.contains(requests[4].key));
  CHECK_FALSE(table.rows.contains(requests[5].key));
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: a batch cancelled while a statement is out releases its "
                 "landed claims and the claims made before, then completes") {
  using namespace net::experimental::awaitable_operators;
  std::vector<idem::ClaimRequest> requests;
  for (int i = 0; i < 6; ++i)
    requests.push_back({idem::Key{"PAY", "c" + std::to_string(i)}, "fp"});
  table.hang_chunk = 2;  // c4 and c5 land, and their statement never answers
  const bool timer_first = run([&]() -> net::awaitable<bool> {
    // Long after the second statement hangs, whatever the build's speed.
    net::steady_timer timer(co_await net::this_coro::executor, 200ms);
    const auto first = co_await (idem::async::claim_batch(store, requests) ||
                                 timer.async_wait(net::use_awaitable));
    co_return first.index() == 1;
  }());
  CHECK(timer_first);
  for (std::size_t i = 0; i < 6; ++i) {
    INFO("c" << i);
    const idem::Record& r = table.rows.at(requests[i].key);
    CHECK(r.status == idem::Status::failed);
    CHECK(r.retryable);
    CHECK(r.snapshot.find(i < 4 ? "idem.abandoned" : "idem.cancelled") != std::string::npos);
  }
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: a batch whose statement wrote its keys and then failed "
                 "releases them with the claims made before") {
  std::vector<idem::ClaimRequest> requests;
  for (int i = 0; i < 6; ++i)
    requests.push_back({idem::Key{"PAY", "w" + std::to_string(i)}, "fp"});
  table.fail_after_write_chunk = 2;  // w4 and w5 land, then their statement fails
  CHECK_THROWS_WITH(run(idem::async::claim_batch(store, requests)), "fatal");
  for (std::size_t i = 0; i < 6; ++i) {
    INFO("w" << i);
    const idem::Record& r = table.rows.at(requests[i].key);
    CHECK(r.status == idem::Status::failed);
    CHECK(r.retryable);
  }
  CHECK(table.settled == 0);  // the statement ended with its error: nothing to wait for
}

TEST_CASE_METHOD(Scripted,
                 "async skeleton: a batch cancelled in the pause before a retry waits for "
                 "no connection and leaves no claim") {
  using namespace net::experimental::awaitable_operators;
  ScriptedStore patient(table, {.max_attempts = 3, .backoff = 10s, .max_backoff = 10s});
  std::vector<idem::ClaimRequest> requests;
  for (int i = 0; i < 6; ++i)
    requests.push_back({idem::Key{"PAY", "p" + std::to_string(i)}, "fp"});
  table.failures["claim_chunk"] = {FailureKind::transient};  // the first statement: a deadlock
  const bool timer_first = run([&]() -> net::awaitable<bool> {
    net::steady_timer timer(co_await net::this_coro::executor, 50ms);
    const auto first = co_await (idem::async::claim_batch(patient, requests) ||
                                 timer.async_wait(net::use_awaitable));
    co_return first.index() == 1;
  }());
  CHECK(timer_first);
  CHECK(table.settled == 0);  // a failed statement's healthy connection is not waited for
  CHECK(table.rows.empty());
  // The same for a single claim.
  table.failures["insert"] = {FailureKind::transient};
  const idem::Key single{"PAY", "p-single"};
  const bool claim_cut = run([&]() -> net::awaitable<bool> {
    net::steady_timer timer(co_await net::this_coro::executor, 50ms);
    const auto first =
        co_await (patient.claim(single, "fp", {}) || timer.async_wait(net::use_awaitable));
    co_return first.index() == 1;
  }());
  CHECK(claim_cut);
  CHECK(table.settled == 0);
  CHECK_FALSE(table.rows.contains(single));
}
