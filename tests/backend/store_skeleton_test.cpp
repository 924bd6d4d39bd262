// The SQL store skeleton (idem/same_transaction/bound_sql_store.hpp) on a scripted backend, without
// a server: the claim loop, the reconciliation of a write whose reply was lost, retries and giving
// up, the halving of a failed batch, and the bound store's checks. The server suites run the same
// skeleton on MariaDB and SQLite.

#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/backend/pool.hpp>
#include <idem/guard.hpp>
#include <idem/run_once.hpp>
#include <idem/same_transaction/bound_sql_store.hpp>
#include <idem/same_transaction/transaction_try.hpp>

using namespace std::chrono_literals;

namespace {

constexpr unsigned transient_code = 1;
constexpr unsigned reply_lost_code = 2;
constexpr unsigned fatal_code = 3;

idem::StoreError failure(unsigned code) {
  idem::Diagnostics d;
  d.code = code;
  return idem::StoreError("scripted failure " + std::to_string(code), code != fatal_code, d);
}

// The "server": one table of records, a clock, and the calls made, with failures scripted per
// operation. A scripted failure can strike before the statement (it did not happen) or after
// it (it happened, and only its reply was lost).
struct Server {
  std::map<idem::Key, idem::Record> rows;
  idem::TimePoint now{1'700'000'000'000ms};
  std::vector<std::string> calls;
  struct Fault {
    std::string op;
    unsigned code;
    bool after;  // the statement happened before the failure
  };
  std::vector<Fault> faults;
  // Runs between a claim's read and its takeover write: another caller acting meanwhile.
  std::function<void()> before_takeover;
  std::function<void()> before_next_try;  // with_transaction's next try starts
  std::size_t chunk_fail_above = 0;  // claim_chunk fails (transient) for chunks wider than this
  std::vector<std::size_t> chunk_sizes;
  int inserts = 0;
  int fatal_after_insert = 0;  // the insert with this number (from 1) lands, then fails (fatal)

  template <class Fn>
  auto run(const std::string& op, Fn&& fn) {
    calls.push_back(op);
    if (op == "insert" && ++inserts == fatal_after_insert) {
      fn();
      throw failure(fatal_code);
    }
    for (auto it = faults.begin(); it != faults.end(); ++it) {
      if (it->op != op) continue;
      const Fault f = *it;
      faults.erase(it);
      if (f.after) fn();
      throw failure(f.code);
    }
    return fn();
  }
};

struct FakeConnection {
  explicit FakeConnection(Server* s) : server(s) {}
  Server* server;
  bool in_transaction = true;
  Server* native() noexcept { return server; }
  static bool borrowed() noexcept { return false; }
};

struct FakeOps {
  static constexpr std::size_t max_batch_rows = 8;
  Server* server;

  std::optional<idem::Record> insert(FakeConnection&, const idem::Key& key, std::string_view fp,
                                     const idem::Options& o, const std::string& token, bool) const {
    return server->run("insert", [&]() -> std::optional<idem::Record> {
      if (server->rows.count(key) != 0) return std::nullopt;
      auto r = idem::backend::claim_record(key, token, fp, server->now, o);
      server->rows.emplace(key, r);
      return r;
    });
  }
  std::optional<idem::backend::RecordRead> read(FakeConnection&, const idem::Key& key, bool) const {
    return server->run("read", [&]() -> std::optional<idem::backend::RecordRead> {
      auto it = server->rows.find(key);
      if (it == server->rows.end()) return std::nullopt;
      return idem::backend::RecordRead{it->second, server->now};
    });
  }
  bool write_takeover(FakeConnection&, idem::backend::Decision d, const idem::Record& next,
                      const idem::Ticket& read) const {
    if (server->before_takeover) std::exchange(server->before_takeover, nullptr)();
    return server->run("write_takeover", [&] {
      auto it = server->rows.find(next.key);
      if (it == server->rows.end() || it->second.ticket != read ||
          !idem::backend::takeover_holds(it->second, d, server->now))
        return false;
      it->second = next;
      return true;
    });
  }
  bool finish(FakeConnection&, const idem::Key& key, const idem::Ticket& t,
              std::string_view snapshot, idem::Status to, bool retryable) const {
    return server->run("finish", [&] {
      auto it = server->rows.find(key);
      if (it == server->rows.end() || !idem::backend::holds(it->second, t)) return false;
      it->second = idem::backend::finished(it->second, to, snapshot, retryable, server->now);
      return true;
    });
  }
  std::size_t purge(FakeConnection&, std::size_t batch) const {
    return server->run("purge", [&] {
      std::size_t n = 0;
      for (auto it = server->rows.begin(); it != server->rows.end() && n < batch;) {
        if (idem::backend::is_expired(it->second, server->now)) {
          it = server->rows.erase(it);
          ++n;
        } else {
          ++it;
        }
      }
      return n;
    });
  }
  std::size_t release(FakeConnection&, std::size_t batch) const {
    return server->run("release", [&] {
      std::size_t n = 0;
      for (auto& [key, r] : server->rows) {
        if (n == batch) break;
        if (idem::backend::is_stale(r, server->now)) {
          r = idem::backend::released(r, server->now);
          ++n;
        }
      }
      return n;
    });
  }
  idem::same_transaction::RecordProbe probe(FakeConnection&, const idem::Key& key) const {
    return server->run("probe", [&] {
      auto it = server->rows.find(key);
      return idem::same_transaction::RecordProbe{
          it == server->rows.end() ? std::nullopt : std::optional<idem::Record>(it->second),
          server->now};
    });
  }
  bool insert_finished(FakeConnection&, const idem::Record& r) const {
    return server->run("insert_finished", [&] {
      idem::Record stored = r;
      stored.updated_at = server->now;
      return server->rows.emplace(r.key, stored).second;
    });
  }
  // The same, and the COMMIT, as one statement: a duplicate commits nothing.
  bool insert_finished_and_commit(FakeConnection& c, const idem::Record& r) const {
    return server->run("insert_finished_and_commit", [&] {
      idem::Record stored = r;
      stored.updated_at = server->now;
      if (!server->rows.emplace(r.key, stored).second) return false;
      c.in_transaction = false;
      return true;
    });
  }
  std::vector<idem::ClaimResult> claim_chunk(FakeConnection& c,
                                             std::span<const idem::ClaimRequest* const> requests,
                                             std::span<const std::string> tokens,
                                             const idem::Options& o) const {
    if (tokens.size() != requests.size()) throw std::logic_error("a token per request");
    server->chunk_sizes.push_back(requests.size());
    if (server->chunk_fail_above != 0 && requests.size() > server->chunk_fail_above) {
      throw failure(transient_code);
    }
    std::vector<idem::ClaimResult> out;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      out.push_back(idem::backend::claim_on("fake", *this, c, requests[i]->key,
                                            requests[i]->fingerprint, o, tokens[i], false));
    }
    return out;
  }
};

struct FakeDriver {
  using Connection = FakeConnection;
  Server* server;
  std::unique_ptr<Connection> open() const { return std::make_unique<Connection>(server); }
  static void ready(Connection&, idem::Duration, idem::backend::ConnectionPurpose) noexcept {}
  static bool reusable(Connection&) noexcept { return true; }
  static std::string where() { return {}; }
};

struct FakeBackend {
  using Connection = FakeConnection;
  using Native = Server;
  using Pool = idem::backend::BasicPool<FakeDriver>;
  using Ops = FakeOps;
  static constexpr std::string_view name = "fake";
  [[maybe_unused]] static constexpr bool bound_supports_wait = true;
  static constexpr std::string_view begin_hint = "BEGIN";
  static idem::backend::FailureKind classify(const idem::StoreError& e) noexcept {
    switch (e.diagnostics().code) {
      case transient_code:
        return idem::backend::FailureKind::transient;
      case reply_lost_code:
        return idem::backend::FailureKind::reply_lost;
      default:
        return idem::backend::FailureKind::fatal;
    }
  }
  static bool in_transaction(Connection& c) noexcept { return c.in_transaction; }
};

class FakeStore : public idem::backend::StoreSkeleton<FakeBackend> {
 public:
  explicit FakeStore(Server& server, idem::RetryPolicy retry = {.backoff = 1ms, .max_backoff = 1ms})
      : StoreSkeleton(FakeOps{&server}, retry), pool_(FakeDriver{&server}, 2, 100ms, "fake pool") {
    attach(&pool_);
  }
  idem::same_transaction::BoundSqlStore<FakeBackend> bind(
      FakeConnection& c, idem::BoundClaim how = idem::BoundClaim::claim_first) const {
    return idem::same_transaction::BoundSqlStore<FakeBackend>(ops(), c, how);
  }

 private:
  Pool pool_;
};

const idem::Options store_opts{.lease = 10s, .ttl = 1h};
const idem::Key key{"PAY", "k1"};

std::vector<std::string> calls_of(Server& s) {
  return std::exchange(s.calls, {});
}

}  // namespace

TEST_CASE("sql_store: a fresh claim is one insert - a duplicate reads and replays") {
  Server server;
  FakeStore store(server);
  const auto first = store.claim(key, "fp", store_opts);
  CHECK(first.verdict == idem::Verdict::acquired);
  CHECK(calls_of(server) == std::vector<std::string>{"insert"});
  store.complete(key, first.record.ticket, R"({"ok":1})");
  CHECK(calls_of(server) == std::vector<std::string>{"finish"});
  const auto again = store.claim(key, "fp", store_opts);
  CHECK(again.verdict == idem::Verdict::replayed);
  CHECK(again.record.snapshot == R"({"ok":1})");
  CHECK(calls_of(server) == std::vector<std::string>{"insert", "read"});
  CHECK(store.claim(key, "other", store_opts).verdict == idem::Verdict::conflict);
}

TEST_CASE("sql_store: a takeover that loses to a completion in between reads again and replays") {
  Server server;
  FakeStore store(server);
  const auto first = store.claim(key, "fp", store_opts);
  server.now += 10s;  // the first worker's lease ran out
  calls_of(server);
  // ...but it completes between the duplicate's read and its takeover write.
  server.before_takeover = [&] {
    auto& r = server.rows.at(key);
    r = idem::backend::finished(r, idem::Status::succeeded, "late", false, server.now);
  };
  const auto dup = store.claim(key, "fp", store_opts);
  CHECK(dup.verdict == idem::Verdict::replayed);
  CHECK(dup.record.snapshot == "late");
  CHECK(server.rows.at(key).ticket == first.record.ticket);  // never overwritten
  CHECK(calls_of(server) ==
        std::vector<std::string>{"insert", "read", "write_takeover", "insert", "read"});
}

TEST_CASE("sql_store: a row purged between the insert and the read is inserted again") {
  Server server;
  server.rows.emplace(key,
                      idem::backend::claim_record(key, "old", "fp", server.now - 2h, store_opts));
  // Drives claim_on directly, so that the purge can fall between its insert and its read.
  struct PurgingOps : FakeOps {
    bool* purged;
    std::optional<idem::backend::RecordRead> read(FakeConnection& conn, const idem::Key& k,
                                                  bool bound) const {
      if (!*purged) server->rows.clear();
      *purged = true;
      return FakeOps::read(conn, k, bound);
    }
  };
  bool purged = false;
  const PurgingOps ops{{&server}, &purged};
  FakeConnection c(&server);
  const auto r = idem::backend::claim_on("fake", ops, c, key, "fp", store_opts, "mine", false);
  CHECK(r.verdict == idem::Verdict::acquired);
  CHECK(r.record.ticket == idem::Ticket{1, "mine"});
  CHECK(calls_of(server) == std::vector<std::string>{"insert", "read", "insert"});
}

TEST_CASE("sql_store: a claim that never settles is a retryable StoreError") {
  Server server;
  FakeConnection c(&server);
  struct Restless : FakeOps {
    // Every takeover write finds the row moved on.
    bool write_takeover(FakeConnection&, idem::backend::Decision, const idem::Record&,
                        const idem::Ticket&) const {
      return false;
    }
  };
  const Restless ops{{&server}};
  server.rows.emplace(key,
                      idem::backend::claim_record(key, "other", "fp", server.now - 1h, store_opts));
  server.now += 20s;
  try {
    idem::backend::claim_on("fake", ops, c, key, "fp", store_opts, "mine", false);
    FAIL("no exception");
  } catch (const idem::StoreError& e) {
    CHECK(e.retryable());
    CHECK_THAT(e.what(), Catch::Contains("did not settle after 16 rounds"));
  }
}

TEST_CASE("sql_store: a claim whose reply was lost recognises its own row on the retry") {
  Server server;
  FakeStore store(server);
  server.faults.push_back({"insert", reply_lost_code, true});  // written, reply lost
  const auto r = store.claim(key, "fp", store_opts);
  CHECK(r.verdict == idem::Verdict::acquired);
  CHECK(r.record.ticket.fence == 1);  // the row the lost try wrote, not a takeover
  CHECK(calls_of(server) == std::vector<std::string>{"insert", "insert", "read"});
}

TEST_CASE("sql_store: a complete whose reply was lost is reconciled by the owner token") {
  Server server;
  FakeStore store(server);
  const auto claimed = store.claim(key, "fp", store_opts);
  calls_of(server);
  SECTION("the lost write landed: the retry reads it and does not write again") {
    server.faults.push_back({"finish", reply_lost_code, true});
    store.complete(key, claimed.record.ticket, R"({"ok":1})");
    CHECK(calls_of(server) == std::vector<std::string>{"finish", "read"});
  }
  SECTION("the lost write did not land: the retry reads, then writes") {
    server.faults.push_back({"finish", reply_lost_code, false});
    store.complete(key, claimed.record.ticket, R"({"ok":1})");
    CHECK(calls_of(server) == std::vector<std::string>{"finish", "read", "finish"});
  }
  SECTION("a transient failure (nothing happened) is simply sent again, without a read") {
    server.faults.push_back({"finish", transient_code, false});
    store.complete(key, claimed.record.ticket, R"({"ok":1})");
    CHECK(calls_of(server) == std::vector<std::string>{"finish", "finish"});
  }
  const auto r = server.rows.at(key);
  CHECK(r.status == idem::Status::succeeded);
  CHECK(r.snapshot == R"({"ok":1})");
}

TEST_CASE("sql_store: a lost reply over a row that moved on is still LeaseLost") {
  Server server;
  FakeStore store(server);
  const auto claimed = store.claim(key, "fp", store_opts);
  server.now += 10s;
  const auto taken = store.claim(key, "fp", store_opts);  // a takeover after the lease ran out
  REQUIRE(taken.verdict == idem::Verdict::acquired);
  server.faults.push_back({"finish", reply_lost_code, false});
  CHECK_THROWS_WITH(store.complete(key, claimed.record.ticket, "{}"),
                    Catch::StartsWith("fake: the claim on PAY/k1 (fence 1) is no longer held"));
  CHECK(server.rows.at(key).ticket == taken.record.ticket);
}

TEST_CASE("sql_store: fatal failures are not retried - transient ones are, up to the policy") {
  Server server;
  FakeStore store(server, {.max_attempts = 3, .backoff = 1ms, .max_backoff = 1ms});
  server.faults.push_back({"insert", fatal_code, false});
  CHECK_THROWS_WITH(store.claim(key, "fp", store_opts), "scripted failure 3");
  CHECK(calls_of(server).size() == 1);
  for (int i = 0; i < 3; ++i)
    server.faults.push_back({"insert", transient_code, false});
  CHECK_THROWS_WITH(store.claim(key, "fp", store_opts),
                    "fake: claim gave up after 3 tries: scripted failure 1");
  CHECK(calls_of(server).size() == 3);
  CHECK(store.claim(key, "fp", store_opts).verdict == idem::Verdict::acquired);
}

TEST_CASE("sql_store: a batch statement that fails is tried again at half its width") {
  Server server;
  FakeStore store(server);
  server.chunk_fail_above = 2;
  std::vector<idem::ClaimRequest> requests;
  for (int i = 0; i < 11; ++i)
    requests.push_back({idem::Key{"PAY", "b" + std::to_string(i)}, "fp"});
  requests.push_back(requests[3]);  // a repeat: claimed after the others, sees their claim
  const auto results = store.claim_batch(requests, store_opts);
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i + 1 < results.size(); ++i) {
    CHECK(results[i].verdict == idem::Verdict::acquired);
    CHECK(results[i].record.key == requests[i].key);
  }
  CHECK(results.back().verdict == idem::Verdict::in_progress);
  // 8 fails, 4 fails, 2 succeeds; each clean chunk doubles the width again (4 fails, 2 ...),
  // and the last chunk is what is left (3 fails, 2, then 1).
  const std::vector<std::size_t> expected{8, 4, 2, 4, 2, 4, 2, 4, 2, 3, 2, 1};
  CHECK(server.chunk_sizes == expected);
}

TEST_CASE(
    "sql_store: a batch that fails midway releases the claims it made and those its failed "
    "statement wrote") {
  Server server;
  FakeStore store(server);
  server.fatal_after_insert = 10;  // 8 keys claimed, then the second chunk's second key fails
  std::vector<idem::ClaimRequest> requests;
  for (int i = 0; i < 11; ++i)
    requests.push_back({idem::Key{"PAY", "m" + std::to_string(i + 10)}, "fp"});
  CHECK_THROWS_AS(store.claim_batch(requests, store_opts), idem::StoreError);
  REQUIRE(server.rows.size() == 10);  // the eleventh was never sent
  for (const auto& [k, r] : server.rows) {
    INFO(k.id());
    CHECK(r.status == idem::Status::failed);
    CHECK(r.retryable);
    CHECK(r.snapshot.find("idem.abandoned") != std::string::npos);
  }
}

TEST_CASE("sql_store: housekeeping runs in batches - a bound store needs a transaction") {
  Server server;
  FakeStore store(server);
  for (int i = 0; i < 5; ++i)
    store.claim(idem::Key{"PAY", "h" + std::to_string(i)}, "", store_opts);
  server.now += 20s;
  CHECK(store.release_stale(3) == 3);
  CHECK(store.release_stale(3) == 2);
  server.now += 2h;
  calls_of(server);
  CHECK(store.purge_expired(2, 10) == 5);
  CHECK(calls_of(server) == std::vector<std::string>{"purge", "purge", "purge"});

  FakeConnection c(&server);
  auto bound = store.bind(c);
  const auto r = bound.claim(key, "fp", store_opts);
  REQUIRE(r.verdict == idem::Verdict::acquired);
  CHECK_FALSE(bound.committable());
  bound.complete(key, r.record.ticket, "{}");
  CHECK(bound.committable());
  c.in_transaction = false;
  CHECK_THROWS_WITH(bound.claim(idem::Key{"PAY", "k2"}, "fp", store_opts),
                    Catch::StartsWith("fake::BoundStore: no transaction is open on the "
                                      "connection (BEGIN first)"));
}

TEST_CASE("sql_store: a record-last claim writes its finished record last, or is superseded") {
  Server server;
  FakeStore store(server);
  FakeConnection c(&server);
  const idem::Key key{"PAY", "last"};
  const idem::Options o{.lease = 10s, .ttl = 1h};

  SECTION("fresh: a probe, then one INSERT of the finished record; nothing in between") {
    auto tx = store.bind(c, idem::BoundClaim::record_last);
    const auto r = tx.claim(key, "fp", o);
    REQUIRE(r.verdict == idem::Verdict::acquired);
    CHECK(r.record == idem::backend::claim_record(key, r.record.ticket.owner, "fp", server.now, o));
    CHECK(server.rows.empty());
    server.now += 5ms;
    tx.complete(key, r.record.ticket, "7");
    CHECK(server.calls == std::vector<std::string>{"probe", "insert_finished"});
    const idem::Record& stored = server.rows.at(key);
    CHECK(stored.status == idem::Status::succeeded);
    CHECK(stored.snapshot == "7");
    CHECK(stored.ticket == r.record.ticket);
    CHECK(stored.created_at == r.record.created_at);
    CHECK(stored.updated_at == server.now);
    CHECK(tx.committable());
    CHECK_THROWS_AS(tx.complete(key, r.record.ticket, "7"), idem::LeaseLost);  // not twice
  }

  SECTION("superseded: another request's row met at the INSERT") {
    auto tx = store.bind(c, idem::BoundClaim::record_last);
    const auto r = tx.claim(key, "fp", o);
    REQUIRE(r.verdict == idem::Verdict::acquired);
    server.rows.emplace(key, idem::backend::finished(
                                 idem::backend::claim_record(key, "winner", "fp", server.now, o),
                                 idem::Status::succeeded, "1", false, server.now));
    try {
      tx.complete(key, r.record.ticket, "2");
      FAIL("complete went through");
    } catch (const idem::StoreError& e) {
      CHECK(e.retryable());
      CHECK_THAT(e.what(), Catch::Contains("superseded"));
    }
    CHECK(server.rows.at(key).snapshot == "1");
    CHECK(!tx.committable());
    CHECK_THROWS_WITH(tx.check_committable(), Catch::Contains("superseded"));
    // The guard then abandons the claim: nothing more is written, no error.
    server.calls.clear();
    tx.abandon(key, r.record.ticket, "{}");
    CHECK(server.calls.empty());
    CHECK(!tx.committable());
  }

  SECTION("an abandoned claim that meets the winner's row is superseded without an error") {
    auto tx = store.bind(c, idem::BoundClaim::record_last);
    const auto r = tx.claim(key, "fp", o);
    server.rows.emplace(key, idem::backend::claim_record(key, "winner", "fp", server.now, o));
    tx.abandon(key, r.record.ticket, "{}");
    CHECK(server.rows.at(key).ticket.owner == "winner");
    CHECK_THROWS_WITH(tx.check_committable(), Catch::Contains("superseded"));
  }

  SECTION("a stored record decides without a write; a takeover is written first") {
    server.rows.emplace(
        key, idem::backend::finished(idem::backend::claim_record(key, "first", "fp", server.now, o),
                                     idem::Status::succeeded, "1", false, server.now));
    auto tx = store.bind(c, idem::BoundClaim::record_last);
    CHECK(tx.claim(key, "fp", o).verdict == idem::Verdict::replayed);
    CHECK(tx.claim(key, "other", o).verdict == idem::Verdict::conflict);
    CHECK(server.calls == std::vector<std::string>{"probe", "probe"});
    server.rows.at(key).status = idem::Status::failed;
    server.rows.at(key).retryable = true;
    const auto r = tx.claim(key, "fp", o);
    REQUIRE(r.verdict == idem::Verdict::acquired);
    CHECK(r.record.ticket.fence == 2);
    CHECK(server.rows.at(key).ticket == r.record.ticket);  // written under its lock
    tx.complete(key, r.record.ticket, "2");
    CHECK(server.calls.back() == "finish");  // the fenced UPDATE, not an INSERT
    CHECK(tx.committable());
  }
}

namespace {

// One try of with_transaction on the fake connection (idem::same_transaction::run_try), its ends
// noted among the server's calls.
struct FakeTry {
  FakeConnection& c;
  const void* handle() const noexcept { return c.server; }
  void begin() { c.in_transaction = true; }
  void commit() {
    c.server->calls.emplace_back("commit");
    c.in_transaction = false;
  }
  void roll_back() {
    c.server->calls.emplace_back("roll_back");
    c.in_transaction = false;
  }
  void roll_back_quietly() noexcept { roll_back(); }
};

}  // namespace

TEST_CASE("sql_store: in with_transaction a record-last result travels with the COMMIT") {
  Server server;
  FakeStore store(server);
  FakeConnection c(&server);
  FakeTry tx{c};
  idem::same_transaction::TryReport report;
  const idem::Key key{"PAY", "deferred"};
  const idem::Options o{.lease = 10s, .ttl = 1h};
  auto in_try = [&](auto&& body) {
    return idem::same_transaction::run_try(tx, "fake tx", report, body);
  };

  SECTION("fresh: a probe, then the INSERT and the COMMIT as one statement") {
    in_try([&] {
      auto bound = store.bind(c, idem::BoundClaim::record_last);
      const auto r = bound.claim(key, "fp", o);
      REQUIRE(r.verdict == idem::Verdict::acquired);
      bound.complete(key, r.record.ticket, "7");
      CHECK(server.rows.empty());  // it waits for the COMMIT
      CHECK(bound.committable());
    });
    CHECK(server.calls == std::vector<std::string>{"probe", "insert_finished_and_commit"});
    CHECK(server.rows.at(key).snapshot == "7");
  }

  SECTION("a row met at the COMMIT: superseded, rolled back, a retryable StoreError") {
    try {
      in_try([&] {
        auto bound = store.bind(c, idem::BoundClaim::record_last);
        const auto r = bound.claim(key, "fp", o);
        bound.complete(key, r.record.ticket, "2");
        server.rows.emplace(
            key,
            idem::backend::finished(idem::backend::claim_record(key, "winner", "fp", server.now, o),
                                    idem::Status::succeeded, "1", false, server.now));
      });
      FAIL("the try committed");
    } catch (const idem::StoreError& e) {
      CHECK(e.retryable());
      CHECK_THAT(e.what(), Catch::Contains("superseded"));
    }
    CHECK(server.calls ==
          std::vector<std::string>{"probe", "insert_finished_and_commit", "roll_back"});
    CHECK(server.rows.at(key).snapshot == "1");
  }

  SECTION("a retryable failure rolls back without writing the record") {
    in_try([&] {
      auto bound = store.bind(c, idem::BoundClaim::record_last);
      const auto r = bound.claim(key, "fp", o);
      bound.fail(key, r.record.ticket, "{}", true);
    });
    CHECK(server.calls == std::vector<std::string>{"probe", "roll_back"});
    CHECK(server.rows.empty());
  }

  SECTION("the store's next claim or read writes the waiting record first") {
    in_try([&] {
      auto bound = store.bind(c, idem::BoundClaim::record_last);
      const auto r = bound.claim(key, "fp", o);
      bound.complete(key, r.record.ticket, "7");
      CHECK(bound.claim(key, "fp", o).verdict == idem::Verdict::replayed);
      const idem::Key other{"PAY", "other"};
      const auto r2 = bound.claim(other, "fp", o);
      bound.complete(other, r2.record.ticket, "8");
      CHECK(bound.find(other));
    });
    CHECK(server.calls == std::vector<std::string>{"probe", "insert_finished", "probe", "probe",
                                                   "insert_finished", "read", "commit"});
  }

  SECTION("a transaction of the caller's own writes the record at once") {
    auto bound = store.bind(c, idem::BoundClaim::record_last);
    const auto r = bound.claim(key, "fp", o);
    bound.complete(key, r.record.ticket, "7");
    CHECK(server.calls == std::vector<std::string>{"probe", "insert_finished"});
  }
}

namespace {

// The kinds of the events an observer was given, in order.
struct Kinds final : idem::Observer {
  std::vector<idem::EventKind> seen;
  void on_event(const idem::Event& e) noexcept override { seen.push_back(e.kind); }
};

}  // namespace

TEST_CASE("sql_store: with_transaction reports the try that ended, not the ones rolled back") {
  using K = idem::EventKind;
  Server server;
  FakeStore store(server);
  FakeConnection c(&server);
  FakeTry tx{c};
  Kinds kinds;
  const idem::Key key{"PAY", "counted"};
  const idem::Options o{.lease = 10s, .ttl = 1h, .observer = &kinds};
  int tries = 0;
  // with_transaction's loop over run_try, with the body given.
  auto with_transaction = [&](auto&& body) {
    return idem::same_transaction::retry_transaction(
        {.retry = {.max_attempts = 3, .backoff = 1ms, .max_backoff = 1ms}}, "fake tx",
        [&](idem::same_transaction::TryReport& report) {
          if (server.before_next_try) std::exchange(server.before_next_try, nullptr)();
          return idem::same_transaction::run_try(tx, "fake tx", report, [&] {
            ++tries;
            auto bound = store.bind(c, idem::BoundClaim::record_last);
            return body(bound);
          });
        });
  };

  SECTION("superseded at the COMMIT: its failure and the retry, then the replay") {
    const auto out = with_transaction([&](auto& bound) {
      return idem::run_once(
          bound, key, "fp",
          [&] {
            // Another request for the key finishes while this one's business runs.
            server.rows.emplace(key,
                                idem::backend::finished(
                                    idem::backend::claim_record(key, "winner", "fp", server.now, o),
                                    idem::Status::succeeded, "1", false, server.now));
            return 2;
          },
          o);
    });
    CHECK(tries == 2);
    CHECK(out.verdict() == idem::Verdict::replayed);
    CHECK(out.value() == 1);
    // Not acquired and committed: the try that said so rolled back.
    CHECK(kinds.seen == std::vector<K>{K::transaction_error, K::transaction_retried, K::replayed});
  }

  SECTION("a transient failure of the business's own SQL: the retried try counts once") {
    const auto out = with_transaction([&](auto& bound) {
      return idem::run_once(
          bound, key, "fp",
          [&] {
            if (tries == 1) {
              // The fake keeps no transaction: undo what the rollback undoes (the abandoned
              // claim's row).
              server.before_next_try = [&] { server.rows.erase(key); };
              throw failure(transient_code);
            }
            return 2;
          },
          o);
    });
    CHECK(tries == 2);
    CHECK(out.value() == 2);
    CHECK(kinds.seen == std::vector<K>{K::transaction_retried, K::acquired, K::committed});
  }

  SECTION("the body's own exception after a commit: the answer stands, the result was not kept") {
    CHECK_THROWS_AS(with_transaction([&](auto& bound) {
                      idem::run_once(
                          bound, key, "fp", [] { return 2; }, o);
                      throw std::runtime_error("the handler failed after the claim committed");
                    }),
                    std::runtime_error);
    CHECK(server.rows.empty());
    CHECK(kinds.seen == std::vector<K>{K::acquired, K::failed});
  }

  SECTION("a guard that adopts a claim inside the try reports through the try as well") {
    const auto out = with_transaction([&](auto& bound) {
      idem::IdempotencyGuard guard(bound, bound.claim(key, "fp", o), &kinds);
      if (tries == 1) {
        server.before_next_try = [&] { server.rows.erase(key); };  // the rollback's undo
        throw failure(transient_code);  // the guard is abandoned: its failure rolls back too
      }
      guard.commit(2);
      return 2;
    });
    CHECK(out == 2);
    CHECK(kinds.seen == std::vector<K>{K::transaction_retried, K::committed});
  }

  SECTION("superseded on every try: each reported, then the store_error") {
    const idem::Key other{"PAY", "always-late"};
    CHECK_THROWS_AS(with_transaction([&](auto& bound) {
                      return idem::run_once(
                          bound, other, "fp",
                          [&] {
                            // A winner each time, gone again before the next try's read.
                            server.rows.emplace(
                                other,
                                idem::backend::finished(
                                    idem::backend::claim_record(other, "w", "fp", server.now, o),
                                    idem::Status::succeeded, "1", false, server.now));
                            server.before_next_try = [&] { server.rows.erase(other); };
                            return 2;
                          },
                          o);
                    }),
                    idem::StoreError);
    CHECK(tries == 3);
    CHECK(kinds.seen == std::vector<K>{K::transaction_error, K::transaction_retried,
                                       K::transaction_error, K::transaction_retried,
                                       K::transaction_error, K::store_error});
  }
}
