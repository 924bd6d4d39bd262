// pg.claim, pg.claim_shape, pg.cycle, pg.mix, pg.mix_handwritten, pg.tx, pg.tx_handwritten:
// idem::pg against bare libpq on the same server, same table shapes, same thread count. Both
// sides prepare each statement once per connection and run it by name (what idem does on its
// own connections). pg.async_cycle: pg.cycle's library side from ONE loop thread on the
// coroutine store against the same on 32 blocked threads (as mysql.async_cycle).
#include "common.hpp"
#include "scenarios.hpp"

#ifdef IDEM_BENCH_PG

#include <libpq-fe.h>

#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <idem/idem.hpp>
#include <idem/pg.hpp>

#ifdef IDEM_BENCH_ASYNC
#include <idem/pg/async.hpp>

#include "async_run.hpp"
#endif

namespace bench {
namespace {

constexpr const char* pg_lib_table = "bench_pg_lib";
constexpr const char* pg_raw_table = "bench_pg_raw";

// A bare libpq connection of the baseline's.
class RawPg {
 public:
  explicit RawPg(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {
    if (PQstatus(conn_) != CONNECTION_OK) {
      const std::string e = PQerrorMessage(conn_);
      PQfinish(conn_);
      throw std::runtime_error("PQconnectdb: " + e);
    }
  }
  ~RawPg() { PQfinish(conn_); }
  RawPg(const RawPg&) = delete;
  RawPg& operator=(const RawPg&) = delete;

  // Runs a statement with text parameters; returns the rows it wrote or answered. Throws on
  // any error but a unique violation, which returns -1 (for the hand-written dedup).
  long run(const char* sql, std::initializer_list<const char*> params) {
    std::vector<const char*> values(params);
    const int count = static_cast<int>(values.size());
    auto it = prepared_.find(sql);
    if (it == prepared_.end()) {
      const std::string name = "raw_" + std::to_string(prepared_.size() + 1);
      PGresult* p = PQprepare(conn_, name.c_str(), sql, count, nullptr);
      const bool ok = PQresultStatus(p) == PGRES_COMMAND_OK;
      PQclear(p);
      if (!ok) throw std::runtime_error(std::string("libpq: PQprepare: ") + PQerrorMessage(conn_));
      it = prepared_.emplace(sql, name).first;
    }
    PGresult* r =
        PQexecPrepared(conn_, it->second.c_str(), count, values.data(), nullptr, nullptr, 0);
    const ExecStatusType status = PQresultStatus(r);
    long n = 0;
    if (status == PGRES_TUPLES_OK) {
      n = PQntuples(r);
    } else if (status == PGRES_COMMAND_OK) {
      n = std::atol(PQcmdTuples(r));
    } else {
      const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      const bool duplicate = state != nullptr && std::string_view(state) == "23505";
      const std::string e = PQerrorMessage(conn_);
      PQclear(r);
      if (duplicate) return -1;
      throw std::runtime_error(std::string("libpq: ") + e);
    }
    PQclear(r);
    return n;
  }
  // Runs `sql` without parameters (it may hold several statements).
  void query(const char* sql) {
    PGresult* r = PQexec(conn_, sql);
    const ExecStatusType status = PQresultStatus(r);
    PQclear(r);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
      throw std::runtime_error(std::string("libpq: ") + PQerrorMessage(conn_));
  }

 private:
  PGconn* conn_;
  std::unordered_map<std::string, std::string> prepared_;  // SQL text -> prepared name
};

std::string conninfo_of(const Config& config) {
  return fmt::format("host={} user=idem dbname=idem", config.pg_socket);
}

// The server, the library's store (its own table) and a bare connection per thread.
struct PgServer {
  std::shared_ptr<idem::pg::Pool> pool;
  std::unique_ptr<idem::pg::Store> store;
  std::vector<std::unique_ptr<RawPg>> raw;

  PgServer(const Config& config, int threads) {
    if (config.pg_socket.empty()) {
      throw std::runtime_error(
          "no PostgreSQL socket directory (--pg-socket; scripts/bench starts one)");
    }
    pool = std::make_shared<idem::pg::Pool>(
        idem::pg::ConnectionParams{.conninfo = conninfo_of(config)},
        idem::pg::PoolParams{.size = static_cast<std::size_t>(threads)});
    store = std::make_unique<idem::pg::Store>(pool, idem::pg::StoreParams{.table = pg_lib_table});
    store->ensure_schema();
    {
      // Open every connection of the pool up front: connecting is not what is measured.
      std::vector<idem::pg::Pool::Handle> handles;
      for (int t = 0; t < threads; ++t)
        handles.push_back(pool->acquire());
    }
    for (int t = 0; t < threads; ++t)
      raw.push_back(std::make_unique<RawPg>(conninfo_of(config)));
    raw[0]->query(idem::pg::record_table_ddl(idem::pg::TableName{"", pg_raw_table}).c_str());
    for (const char* table : {"bench_pg_lib_order", "bench_pg_raw_order"}) {
      raw[0]->query(fmt::format("CREATE TABLE IF NOT EXISTS {} (order_id text PRIMARY KEY, amount "
                                "bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
                                table)
                        .c_str());
    }
    raw[0]->query(
        "CREATE TABLE IF NOT EXISTS bench_pg_dedup (dedup_key text NOT NULL, biz_type text NOT "
        "NULL, response text NULL, PRIMARY KEY (dedup_key, biz_type))");
  }
  void truncate(const std::string& table) { raw[0]->query(("TRUNCATE " + table).c_str()); }
};

// The hand-written claim: the same row the library's claim writes, by a plain INSERT.
constexpr const char* raw_claim_sql =
    "INSERT INTO bench_pg_raw (idempotent_key, biz_type, status, fence, owner_token, "
    "request_hash, response_snapshot, retryable, attempts, lease_until, created_at, updated_at, "
    "expire_at) VALUES ($1, 'BENCH', 0, 1, $2, $3, NULL, 0, 1, now() + interval '30 seconds', "
    "now(), now(), now() + interval '1 day')";
// The same, skipping a duplicate (the hand-written mix).
const std::string raw_claim_or_skip_sql =
    std::string(raw_claim_sql) + " ON CONFLICT (idempotent_key, biz_type) DO NOTHING";
constexpr const char* raw_complete_sql =
    "UPDATE bench_pg_raw SET status = 1, response_snapshot = $1, updated_at = now() WHERE "
    "idempotent_key = $2 AND biz_type = 'BENCH'";

const std::string& owner_token() {
  static const std::string token(32, 'f');
  return token;
}

// The library's own statements on the baseline's table, sent through bare libpq with the
// values idem would send: the statements' cost without the library's.
struct LibraryStatements {
  idem::pg::detail::RecordSql sql =
      idem::pg::detail::make_record_sql(idem::pg::TableName{"", pg_raw_table}.quoted());
  std::string lease = std::to_string(idem::Options{}.lease.count());
  std::string ttl = std::to_string(idem::Options{}.ttl.count());

  // The claim: true for a fresh one (its row answered), false when the key exists.
  bool claim(RawPg& c, const std::string& id) const {
    return c.run(sql.insert.c_str(), {id.c_str(), "BENCH", owner_token().c_str(),
                                      fixed_fingerprint().c_str(), lease.c_str(), ttl.c_str()}) ==
           1;
  }
  // The fresh claim's commit (succeeded, at fence 1, by its owner).
  void complete(RawPg& c, const std::string& id, const std::string& snapshot) const {
    if (c.run(sql.finish.c_str(),
              {"1", snapshot.c_str(), "0", id.c_str(), "BENCH", "1", owner_token().c_str()}) != 1)
      throw std::runtime_error("the baseline's commit missed its claim");
  }
  // A duplicate's read of the stored record.
  void read(RawPg& c, const std::string& id) const {
    if (c.run(sql.select.c_str(), {id.c_str(), "BENCH"}) != 1)
      throw std::runtime_error("the baseline's read found no record");
  }
};

// pg.claim: Store::claim against its own statement through bare libpq (goal 0.9);
// pg.claim_shape: that statement against the hand-written INSERT of the same row (report):
// what ON CONFLICT DO NOTHING and RETURNING the server's times cost on the server.
void claim_scenario(const Config& config, bool shape) {
  const std::string name = shape ? "pg.claim_shape" : "pg.claim";
  const int threads = config.threads > 0 ? config.threads : 32;
  PgServer server(config, threads);
  const std::size_t per = config.ops(30'000, 3'000) / static_cast<std::size_t>(threads);
  const std::size_t total = per * static_cast<std::size_t>(threads);
  const idem::Options options{};
  const LibraryStatements statements;
  auto raw = [&](int t) -> RawPg& { return *server.raw[static_cast<std::size_t>(t)]; };
  auto library_statement = [&](int t, int r) {
    for (std::size_t i = 0; i < per; ++i)
      if (!statements.claim(raw(t), key_id(r, t, i)))
        throw std::runtime_error("the statement's claim found a row");
  };
  Side library{[&](int) { server.truncate(shape ? pg_raw_table : pg_lib_table); },
               [&](int t, int r) {
                 if (shape) return library_statement(t, r);
                 for (std::size_t i = 0; i < per; ++i) {
                   const auto res = server.store->claim(idem::Key{"BENCH", key_id(r, t, i)},
                                                        fixed_fingerprint(), options);
                   if (res.verdict != idem::Verdict::acquired)
                     throw std::runtime_error("not acquired");
                 }
               }};
  Side baseline{[&](int) { server.truncate(pg_raw_table); },
                [&](int t, int r) {
                  if (!shape) return library_statement(t, r);
                  for (std::size_t i = 0; i < per; ++i) {
                    const std::string id = key_id(r, t, i);
                    if (raw(t).run(raw_claim_sql, {id.c_str(), owner_token().c_str(),
                                                   fixed_fingerprint().c_str()}) != 1)
                      throw std::runtime_error("raw claim failed");
                  }
                }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, shape ? "report" : ">= 0.9");
  j["connections"] = threads;
  if (shape) {
    j["library"] = "idem's claim statement through bare libpq (prepared), fresh keys";
    j["baseline"] = "autocommit INSERT of the same row (libpq, prepared, a connection per thread)";
  } else {
    j["library"] =
        "idem::pg::Store::claim on fresh keys: INSERT ... ON CONFLICT DO NOTHING RETURNING the "
        "server's times";
    j["baseline"] = "the same statement through bare libpq (prepared, a connection per thread)";
  }
  emit(j);
}

// pg.cycle and pg.mix: run_once against bare libpq sending idem's statements (the claim, then
// the commit; a duplicate's read of the stored response) (goal 0.9); pg.mix_handwritten:
// against the hand-written dedup (INSERT ... ON CONFLICT DO NOTHING, UPDATE; a duplicate
// skipped without reading anything) (report).
enum class CycleBaseline { statements, handwritten };

void cycle_scenario(const Config& config, bool mix, CycleBaseline against) {
  const bool handwritten = against == CycleBaseline::handwritten;
  const std::string name = handwritten ? "pg.mix_handwritten" : (mix ? "pg.mix" : "pg.cycle");
  const int threads = config.threads > 0 ? config.threads : 32;
  PgServer server(config, threads);
  const std::size_t per = config.ops(15'000, 1'500) / static_cast<std::size_t>(threads);
  const std::size_t total = per * static_cast<std::size_t>(threads);
  const idem::Options options{};
  const LibraryStatements statements;
  auto id_of = [&](int r, int t, std::size_t i) {
    return mix ? mix_key_id(r, t, i) : key_id(r, t, i);
  };
  std::atomic<long> lib_runs{0}, raw_runs{0};
  const std::string snapshot = nlohmann::json{{"status", "paid"}}.dump();
  Side library{[&](int) { server.truncate(pg_lib_table); },
               [&](int t, int r) {
                 long runs = 0;
                 for (std::size_t i = 0; i < per; ++i) {
                   auto out = idem::run_once(
                       *server.store, idem::Key{"BENCH", id_of(r, t, i)}, fixed_fingerprint(),
                       [&] {
                         ++runs;
                         return nlohmann::json{{"status", "paid"}};
                       },
                       options);
                   if (!out) throw std::runtime_error("neither acquired nor replayed");
                 }
                 lib_runs += runs;
               }};
  Side baseline{[&](int) { server.truncate(pg_raw_table); },
                [&](int t, int r) {
                  RawPg& c = *server.raw[static_cast<std::size_t>(t)];
                  long runs = 0;
                  for (std::size_t i = 0; i < per; ++i) {
                    const std::string id = id_of(r, t, i);
                    if (!handwritten) {
                      if (!statements.claim(c, id)) {
                        statements.read(c, id);
                        continue;
                      }
                      statements.complete(c, id, snapshot);
                    } else {
                      if (c.run(raw_claim_or_skip_sql.c_str(), {id.c_str(), owner_token().c_str(),
                                                                fixed_fingerprint().c_str()}) != 1)
                        continue;  // a duplicate: skipped
                      if (c.run(raw_complete_sql, {snapshot.c_str(), id.c_str()}) != 1)
                        throw std::runtime_error("raw UPDATE missed");
                    }
                    ++runs;
                  }
                  raw_runs += runs;
                }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, handwritten ? "report" : ">= 0.9");
  j["connections"] = threads;
  j["library_executions"] = lib_runs.load() / config.rounds_per_side();
  j["baseline_executions"] = raw_runs.load() / config.rounds_per_side();
  if (mix) j["duplicates"] = 0.12;
  j["library"] = mix ? "run_once (no-op business); a duplicate replays the stored response"
                     : "run_once on fresh keys: claim, no-op business, commit of a small JSON";
  if (handwritten) {
    j["baseline"] =
        "INSERT ... ON CONFLICT DO NOTHING + UPDATE; a duplicate's INSERT writes nothing and is "
        "skipped";
  } else {
    j["baseline"] = mix ? "idem's statements through bare libpq: the claim, then the commit; a "
                          "duplicate's claim, then the read of the stored record"
                        : "idem's statements through bare libpq: the claim, then the commit";
  }
  emit(j);
}

// Rounds of the same-transaction scenarios: long enough to be stable on two cores.
constexpr std::size_t transactions_per_round = 5'000;
int tx_rounds(const Config& config) {
  return config.rounds > 0 ? config.rounds : 5;
}

// The hand-written dedup inside the business transaction: BEGIN, INSERT the dedup row (a
// duplicate: ROLLBACK, read the stored response), the business INSERT, UPDATE storing the
// response, COMMIT. A duplicate in flight waits at its INSERT and then fails with a unique
// violation. Returns whether the business ran.
bool handwritten(RawPg& c, const std::string& id) {
  c.query("BEGIN");
  if (c.run("INSERT INTO bench_pg_dedup (dedup_key, biz_type) VALUES ($1, 'BENCH')", {id.c_str()}) <
      0) {
    c.query("ROLLBACK");
    if (c.run("SELECT response FROM bench_pg_dedup WHERE dedup_key = $1 AND biz_type = 'BENCH'",
              {id.c_str()}) != 1)
      throw std::runtime_error("handwritten: no row to replay");
    return false;
  }
  c.run("INSERT INTO bench_pg_raw_order (order_id, amount) VALUES ($1, 100)", {id.c_str()});
  const std::string response = nlohmann::json{{"order", id}}.dump();
  if (c.run("UPDATE bench_pg_dedup SET response = $1 WHERE dedup_key = $2 AND biz_type = 'BENCH'",
            {response.c_str(), id.c_str()}) != 1)
    throw std::runtime_error("handwritten: the UPDATE missed");
  c.query("COMMIT");
  return true;
}

void tx_scenario(const Config& config, bool against_handwritten) {
  const std::string name = against_handwritten ? "pg.tx_handwritten" : "pg.tx";
  const int threads = config.threads > 0 ? config.threads : 32;
  PgServer server(config, threads);
  const std::size_t per = transactions_per_round / static_cast<std::size_t>(threads);
  const std::size_t total = per * static_cast<std::size_t>(threads);
  const idem::Options options{};
  auto id_of = [&](int r, int t, std::size_t i) {
    return against_handwritten ? mix_key_id(r, t, i) : key_id(r, t, i);
  };
  std::atomic<long> lib_runs{0}, raw_runs{0}, tries{0};
  Side library{[&](int) {
                 server.truncate(pg_lib_table);
                 server.truncate("bench_pg_lib_order");
               },
               [&](int t, int r) {
                 long runs = 0;
                 for (std::size_t i = 0; i < per; ++i) {
                   const std::string id = id_of(r, t, i);
                   const auto out = idem::pg::with_transaction(
                       server.store->pool(), [&](idem::pg::Connection& c) {
                         ++tries;
                         auto tx = server.store->bind(c);
                         return idem::run_once(
                             tx, idem::Key{"BENCH", id}, fixed_fingerprint(),
                             [&] {
                               ++runs;
                               c.execute(
                                   "INSERT INTO bench_pg_lib_order (order_id, amount) VALUES ($1, "
                                   "100)",
                                   {id});
                               return nlohmann::json{{"order", id}};
                             },
                             options);
                       });
                   if (!out) throw std::runtime_error("neither acquired nor replayed");
                 }
                 lib_runs += runs;
               }};
  Side baseline{[&](int) {
                  server.truncate("bench_pg_raw_order");
                  server.truncate("bench_pg_dedup");
                },
                [&](int t, int r) {
                  RawPg& c = *server.raw[static_cast<std::size_t>(t)];
                  long runs = 0;
                  for (std::size_t i = 0; i < per; ++i) {
                    const std::string id = id_of(r, t, i);
                    if (against_handwritten) {
                      runs += handwritten(c, id) ? 1 : 0;
                      continue;
                    }
                    c.query("BEGIN");
                    c.run("INSERT INTO bench_pg_raw_order (order_id, amount) VALUES ($1, 100)",
                          {id.c_str()});
                    c.query("COMMIT");
                    ++runs;
                  }
                  raw_runs += runs;
                }};
  const auto t = alternate(name, tx_rounds(config), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, against_handwritten ? ">= 1.0" : "report");
  j["connections"] = threads;
  j["library_executions"] = lib_runs.load() / tx_rounds(config);
  j["baseline_executions"] = raw_runs.load() / tx_rounds(config);
  j["library_transaction_tries"] = tries.load();
  j["library"] =
      "with_transaction + store.bind(c) + run_once, the default record_last: BEGIN, read of the "
      "key (a duplicate replays it), business INSERT, INSERT of the finished record, COMMIT";
  if (against_handwritten) {
    j["duplicates"] = 0.12;
    j["baseline"] =
        "hand-written dedup (libpq): BEGIN, INSERT of a narrow dedup row (a duplicate: ROLLBACK "
        "and SELECT of the stored response), business INSERT, UPDATE storing the response, "
        "COMMIT";
  } else {
    j["baseline"] = "BEGIN, business INSERT, COMMIT (libpq): the transaction without idem";
  }
  emit(j);
}

#ifdef IDEM_BENCH_ASYNC

// pg.async_cycle: run_once on pg::AsyncStore from one loop thread, twice as many requests in
// flight as the AsyncPool has connections, against pg.cycle's library side on as many blocked
// threads as connections (goal >= 1.0), with the loop's timer lateness and the machine's
// (IdleTicker, during the blocking rounds) beside it.
void async_cycle_scenario(const Config& config) {
  const std::string name = "pg.async_cycle";
  const int threads = config.threads > 0 ? config.threads : 32;
  const auto connections = static_cast<std::size_t>(threads);
  const std::size_t in_flight = 2 * connections;
  PgServer server(config, threads);
  // Three times pg.cycle's requests a round, as mysql.async_cycle: one loop thread and the server
  // share the two cores unevenly from one second to the next.
  const std::size_t per = config.ops(45'000, 4'500) / connections;
  const std::size_t total = per * connections;
  idem::async::net::io_context io{1};
  auto pool = std::make_shared<idem::pg::AsyncPool>(
      idem::pg::ConnectionParams{.conninfo = conninfo_of(config)},
      idem::pg::PoolParams{.size = connections});
  idem::pg::AsyncStore store(pool, idem::pg::StoreParams{.table = pg_lib_table});
  {
    std::vector<idem::async::net::awaitable<void>> opening;
    opening.push_back(open_all(*pool));
    run_all(io, std::move(opening));
  }
  LoopLateness lateness;
  LoopLateness idle_lateness;
  long async_runs = 0;
  std::atomic<long> blocking_runs{0};
  Side async_side{[&](int) { server.truncate(pg_lib_table); },
                  [&](int, int r) {
                    Feed feed{r, total};
                    std::vector<idem::async::net::awaitable<void>> requesters;
                    for (std::size_t k = 0; k < in_flight; ++k)
                      requesters.push_back(cycle_requester(store, feed, idem::Options{}));
                    run_all(io, std::move(requesters), &lateness);
                    async_runs += feed.runs;
                  }};
  Side blocking_side{[&](int) { server.truncate(pg_lib_table); },
                     [&](int t, int r) {
                       std::optional<IdleTicker> ticker;
                       if (t == 0) ticker.emplace(idle_lateness);
                       long runs = 0;
                       for (std::size_t i = 0; i < per; ++i) {
                         auto out = idem::run_once(
                             *server.store, idem::Key{"BENCH", key_id(r, t, i)},
                             fixed_fingerprint(),
                             [&] {
                               ++runs;
                               return nlohmann::json{{"status", "paid"}};
                             },
                             idem::Options{});
                         if (!out) throw std::runtime_error("neither acquired nor replayed");
                       }
                       blocking_runs += runs;
                     }};
  const auto t =
      alternate(name, config.rounds_per_side(), 1, threads, total, async_side, blocking_side);
  auto j = throughput_json(name, 1, total, t, ">= 1.0");
  j["baseline_threads"] = threads;
  j["connections"] = connections;  // per side
  j["in_flight"] = in_flight;
  j["library_executions"] = async_runs / config.rounds_per_side();
  j["baseline_executions"] = blocking_runs.load() / config.rounds_per_side();
  j["loop_timer_late"] = lateness.json();
  j["idle_timer_late"] = idle_lateness.json();
  j["library"] = fmt::format(
      "idem::async::run_once on pg::AsyncStore from one loop thread, {} requests in flight on "
      "an AsyncPool of {} connections: claim, no-op business, commit of a small JSON",
      in_flight, connections);
  j["baseline"] = fmt::format(
      "pg.cycle's library side: idem::run_once on the blocking pg::Store, {} threads on a Pool "
      "of {} connections",
      threads, threads);
  emit(j);
}

#endif

}  // namespace

int run_pg(const Config& config, const Selected& selected) {
  int failed = 0;
  if (selected("pg.claim")) failed += attempt("pg.claim", [&] { claim_scenario(config, false); });
  if (selected("pg.claim_shape"))
    failed += attempt("pg.claim_shape", [&] { claim_scenario(config, true); });
  if (selected("pg.cycle")) {
    failed +=
        attempt("pg.cycle", [&] { cycle_scenario(config, false, CycleBaseline::statements); });
  }
  if (selected("pg.mix"))
    failed += attempt("pg.mix", [&] { cycle_scenario(config, true, CycleBaseline::statements); });
  if (selected("pg.mix_handwritten")) {
    failed += attempt("pg.mix_handwritten",
                      [&] { cycle_scenario(config, true, CycleBaseline::handwritten); });
  }
  if (selected("pg.tx")) failed += attempt("pg.tx", [&] { tx_scenario(config, false); });
  if (selected("pg.tx_handwritten"))
    failed += attempt("pg.tx_handwritten", [&] { tx_scenario(config, true); });
  if (selected("pg.async_cycle")) {
#ifdef IDEM_BENCH_ASYNC
    failed += attempt("pg.async_cycle", [&] { async_cycle_scenario(config); });
#else
    progress("pg.async_cycle: idem-bench was built without idem::async (Boost.Asio 1.81)");
    ++failed;
#endif
  }
  return failed;
}

}  // namespace bench

#else

namespace bench {

int run_pg(const Config&, const Selected& selected) {
  int failed = 0;
  for (const char* name : {"pg.claim", "pg.claim_shape", "pg.cycle", "pg.mix", "pg.mix_handwritten",
                           "pg.tx", "pg.tx_handwritten", "pg.async_cycle"}) {
    if (!selected(name)) continue;
    progress(std::string(name) + ": idem-bench was built without idem::pg (libpq)");
    ++failed;
  }
  return failed;
}

}  // namespace bench

#endif
