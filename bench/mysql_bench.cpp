// The mysql.* scenarios: idem::mysql against the bare C API on the same server, same table
// shape (idem::mysql::record_table_ddl), same rows.
#include <atomic>
#include <barrier>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <idem/batch.hpp>
#include <idem/idem.hpp>
#include <idem/mysql.hpp>

#include "common.hpp"
#include "raw_mysql.hpp"
#include "scenarios.hpp"

namespace bench {
namespace {

using idem::mysql::Connection;
using idem::mysql::Pool;
using Kind = RawStmt::Slot::Kind;

constexpr const char* lib_table = "bench_lib";
constexpr const char* raw_table = "bench_raw";
constexpr const char* record_columns =
    "idempotent_key, biz_type, status, fence, owner_token, request_hash, response_snapshot, "
    "retryable, attempts, lease_until, created_at, updated_at, expire_at";

idem::mysql::ConnectionParams connection_params(const Config& config) {
  idem::mysql::ConnectionParams p;
  p.unix_socket = config.socket;
  p.user = config.user;
  p.password = config.password;
  p.database = config.database;
  return p;
}

std::int64_t micros(idem::Duration d) {
  return static_cast<std::int64_t>(d.count()) * 1000;
}

// The row idem::mysql inserts for a claim, written by hand: what a bare INSERT costs.
std::string raw_insert_sql(const std::string& table, const std::string& tail = "") {
  return fmt::format(
      "INSERT INTO {} ({}) VALUES (?, ?, 0, 1, ?, ?, NULL, 0, 1, UTC_TIMESTAMP(3) + INTERVAL ? "
      "MICROSECOND, "
      "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND){}",
      table, record_columns, tail);
}

// The library's read-back, written by hand.
std::string raw_select_sql(const std::string& table) {
  return fmt::format(
      "SELECT {}, UTC_TIMESTAMP(3) FROM {} WHERE idempotent_key = ? AND biz_type = ?",
      record_columns, table);
}

std::string raw_complete_sql(const std::string& table) {
  return fmt::format(
      "UPDATE {} SET status = 1, response_snapshot = ?, updated_at = UTC_TIMESTAMP(3) "
      "WHERE idempotent_key = ? AND biz_type = ?",
      table);
}

// A raw INSERT of the claim row, parameters in the library's order.
struct RawInsert {
  RawStmt stmt;
  RawInsert(RawConn& c, const std::string& sql, const idem::Options& o)
      : stmt(c, sql, {Kind::text, Kind::text, Kind::text, Kind::text, Kind::int64, Kind::int64}) {
    stmt[1].str = "BENCH";
    stmt[2].str = std::string(32, '0');  // an owner token: the column is NOT NULL
    stmt[3].str = fixed_fingerprint();
    stmt[4].num = micros(o.lease);
    stmt[5].num = micros(o.ttl);
  }
  // Returns false on a duplicate key.
  bool execute(const std::string& id) {
    stmt[0].str = id;
    return stmt.execute(true) >= 0;
  }
  long long query(const std::string& id) {
    stmt[0].str = id;
    return stmt.query(true);
  }
};

struct RawKeyed {  // a statement whose last two parameters are the key
  RawStmt stmt;
  RawKeyed(RawConn& c, const std::string& sql, std::vector<Kind> leading)
      : stmt(c, sql, with_key(std::move(leading))) {}
  static std::vector<Kind> with_key(std::vector<Kind> k) {
    k.push_back(Kind::text);
    k.push_back(Kind::text);
    return k;
  }
  RawStmt::Slot& id_slot(std::size_t leading) { return stmt[leading]; }
};

// A connected server with both record tables, a pool for the library and one raw connection
// per thread for the baseline.
struct Server {
  const Config& config;
  std::shared_ptr<Pool> pool;
  std::unique_ptr<idem::mysql::Store> store;
  std::vector<std::unique_ptr<RawConn>> raw;

  Server(const Config& c, int threads) : config(c) {
    pool = std::make_shared<Pool>(
        connection_params(c), idem::mysql::PoolParams{.size = static_cast<std::size_t>(threads)});
    store = std::make_unique<idem::mysql::Store>(
        pool, idem::mysql::StoreParams{.table = lib_table, .insert_returning = !config.read_back});
    store->ensure_schema();
    raw.resize(static_cast<std::size_t>(threads));
    // Open every connection up front, in parallel: connecting is not what is measured.
    run_parallel(threads,
                 [&](int t) { raw[static_cast<std::size_t>(t)] = std::make_unique<RawConn>(c); });
    {
      std::vector<Pool::Handle> handles;
      for (int t = 0; t < threads; ++t)
        handles.push_back(pool->acquire());
    }
    RawConn& admin = *raw[0];
    admin.query(idem::mysql::record_table_ddl(raw_table));
    admin.query(fmt::format("TRUNCATE TABLE {}", lib_table));
    admin.query(fmt::format("TRUNCATE TABLE {}", raw_table));
  }

  RawConn& conn(int t) { return *raw[static_cast<std::size_t>(t)]; }
  void truncate(const std::string& table) { conn(0).query("TRUNCATE TABLE " + table); }
};

const idem::Options options{};

template <class T>
std::vector<std::unique_ptr<T>> per_thread(int threads) {
  return std::vector<std::unique_ptr<T>>(static_cast<std::size_t>(threads));
}

// --- mysql.claim ---------------------------------------------------------------------------

// mysql.claim_floor: the library's claim statement (its SQL text, INSERT IGNORE ... RETURNING
// on MariaDB 10.5+) through the bare C API in place of Store::claim: the best a claim that
// answers with its row can reach against the bare INSERT, so claim / claim_floor is what the
// library itself costs.
void claim_scenario(const Config& config, bool floor) {
  const std::string name = floor ? "mysql.claim_floor" : "mysql.claim";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  const std::size_t per = config.ops(10'000, 3'000) / threads;
  const std::size_t total = per * threads;
  auto inserts = per_thread<RawInsert>(threads);
  auto returning = per_thread<RawInsert>(threads);
  const auto sql = idem::mysql::detail::make_record_sql(lib_table);
  const bool has_returning = server.pool->acquire()->supports_returning();

  Side library{[&](int) { server.truncate(lib_table); },
               [&](int t, int r) {
                 if (floor) {
                   auto& ins = returning[static_cast<std::size_t>(t)];
                   if (!ins)
                     ins = std::make_unique<RawInsert>(
                         server.conn(t), has_returning ? sql.insert_returning : sql.insert,
                         options);
                   for (std::size_t i = 0; i < per; ++i)
                     if (ins->query(key_id(r, t, i)) != (has_returning ? 1 : 0))
                       throw std::runtime_error("the floor's claim found a row");
                   return;
                 }
                 for (std::size_t i = 0; i < per; ++i) {
                   const auto res = server.store->claim(idem::Key{"BENCH", key_id(r, t, i)},
                                                        fixed_fingerprint(), options);
                   if (res.verdict != idem::Verdict::acquired)
                     throw std::runtime_error("not acquired");
                 }
               }};
  Side baseline{[&](int) { server.truncate(raw_table); },
                [&](int t, int r) {
                  auto& ins = inserts[static_cast<std::size_t>(t)];
                  if (!ins)
                    ins = std::make_unique<RawInsert>(server.conn(t), raw_insert_sql(raw_table),
                                                      options);
                  for (std::size_t i = 0; i < per; ++i)
                    if (!ins->execute(key_id(r, t, i))) throw std::runtime_error("duplicate");
                }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, floor ? "report" : ">= 0.9");
  j["connections"] = threads;
  j["library"] = floor ? "the library's claim statement (INSERT IGNORE ... RETURNING where the "
                         "server has it) through the bare C API, fresh keys"
                       : "idem::mysql::Store::claim on fresh keys (pool of 32)";
  j["baseline"] = "prepared autocommit INSERT of the same row (C API, one connection per thread)";
  emit(j);
}

// --- mysql.returning / mysql.returning_dup: what INSERT ... RETURNING changes ---------------
// The library against itself: Store::claim with RETURNING (MariaDB 10.5+) against the same
// store with StoreParams::insert_returning = false (INSERT, then a read of the new row), on
// fresh keys, and on keys already claimed (a duplicate: the failed INSERT, with RETURNING a
// statement reset, and the read of the stored row).

void returning_scenario(const Config& config, bool duplicates) {
  const std::string name = duplicates ? "mysql.returning_dup" : "mysql.returning";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  idem::mysql::Store with(server.pool, {.table = lib_table, .insert_returning = true});
  idem::mysql::Store without(server.pool, {.table = raw_table, .insert_returning = false});
  const std::size_t per = config.ops(10'000, 3'000) / threads;
  const std::size_t total = per * threads;
  const auto want = duplicates ? idem::Verdict::in_progress : idem::Verdict::acquired;
  // Duplicates: the round's keys are claimed (untimed) before the timed claims of them.
  auto side = [&](idem::mysql::Store& store, std::string table) {
    return Side{
        [&store, table, &server, duplicates, threads, per](int r) {
          server.truncate(table);
          if (!duplicates) return;
          run_parallel(threads, [&](int t) {
            for (std::size_t i = 0; i < per; ++i)
              store.claim(idem::Key{"BENCH", key_id(r, t, i)}, fixed_fingerprint(), options);
          });
        },
        [&store, per, want](int t, int r) {
          for (std::size_t i = 0; i < per; ++i) {
            const auto res =
                store.claim(idem::Key{"BENCH", key_id(r, t, i)}, fixed_fingerprint(), options);
            if (res.verdict != want) throw std::runtime_error("unexpected verdict");
          }
        }};
  };
  const Side candidate = side(with, lib_table);
  const Side current = side(without, raw_table);
  const auto t = alternate(name, config.rounds_per_side(), threads, total, candidate, current);
  auto j = throughput_json(name, threads, total, t, "report (RETURNING / read-back)");
  j["connections"] = threads;
  j["library"] = duplicates ? "Store::claim of a claimed key with INSERT ... RETURNING: the "
                              "failed INSERT, a statement reset, the read"
                            : "Store::claim on fresh keys with INSERT ... RETURNING: one statement";
  j["baseline"] = duplicates ? "the same with insert_returning = false: the failed INSERT, the read"
                             : "the same store with insert_returning = false: INSERT, then the "
                               "read of the new row";
  emit(j);
}

// --- mysql.cycle ---------------------------------------------------------------------------

struct RawCycle {
  RawInsert insert;
  RawKeyed complete;
  RawCycle(RawConn& c)
      : insert(c, raw_insert_sql(raw_table), options),
        complete(c, raw_complete_sql(raw_table), {Kind::blob}) {
    complete.stmt[2].str = "BENCH";
  }
  // INSERT, then UPDATE unless the INSERT hit a duplicate. Returns whether it executed.
  bool run(const std::string& id) {
    if (!insert.execute(id)) return false;
    complete.stmt[0].str = nlohmann::json{{"status", "paid"}}.dump();
    complete.stmt[1].str = id;
    if (complete.stmt.execute() != 1) throw std::runtime_error("update missed");
    return true;
  }
};

// The library's claim (INSERT IGNORE ... RETURNING where the server has it) and complete
// (the fenced UPDATE) as its SQL text, through the bare C API: the floors of mysql.cycle and
// mysql.tx, so library / floor is what the library itself costs on top of the SQL it sends.
struct FloorStatements {
  RawInsert claim;
  RawStmt complete;
  bool returning;
  FloorStatements(RawConn& c, const idem::mysql::detail::RecordSql& sql, bool has_returning)
      : claim(c, has_returning ? sql.insert_returning : sql.insert, options),
        complete(c, sql.finish,
                 std::vector<Kind>{Kind::int64, Kind::blob, Kind::int64, Kind::text, Kind::text,
                                   Kind::int64, Kind::text}),
        returning(has_returning) {
    complete[0].num = static_cast<int>(idem::Status::succeeded);
    complete[2].num = 0;  // not retryable
    complete[4].str = "BENCH";
    complete[5].num = 1;                  // the fence of a fresh claim
    complete[6].str = claim.stmt[2].str;  // its owner token
  }
  void claim_fresh(const std::string& id) {
    if (claim.query(id) != (returning ? 1 : 0))
      throw std::runtime_error("the floor's claim found a row");
  }
  void complete_with(const std::string& id, std::string snapshot) {
    complete[1].str = std::move(snapshot);
    complete[3].str = id;
    if (complete.execute() != 1) throw std::runtime_error("the floor's complete missed");
  }
};

void cycle_scenario(const Config& config, bool mix, bool floor = false) {
  const std::string name = floor ? "mysql.cycle_floor" : mix ? "mysql.mix" : "mysql.cycle";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  const std::size_t per = config.ops(5'000, 1'500) / threads;
  const std::size_t total = per * threads;
  auto cycles = per_thread<RawCycle>(threads);
  auto floors = per_thread<FloorStatements>(threads);
  const auto sql = idem::mysql::detail::make_record_sql(lib_table);
  const bool has_returning = server.pool->acquire()->supports_returning();
  // mysql.mix: 3 operations in 25 (12%) repeat a key this thread finished 20 operations ago.
  auto id_of = [&](int r, int t, std::size_t i) {
    const std::size_t m = i % 25;
    if (mix && i >= 25 && (m == 7 || m == 15 || m == 23)) return key_id(r, t, i - 20);
    return key_id(r, t, i);
  };
  std::atomic<long> lib_runs{0}, raw_runs{0};

  Side library{[&](int) { server.truncate(lib_table); },
               [&](int t, int r) {
                 long runs = 0;
                 if (floor) {
                   auto& f = floors[static_cast<std::size_t>(t)];
                   if (!f)
                     f = std::make_unique<FloorStatements>(server.conn(t), sql, has_returning);
                   for (std::size_t i = 0; i < per; ++i) {
                     const std::string id = id_of(r, t, i);
                     f->claim_fresh(id);
                     f->complete_with(id, nlohmann::json{{"status", "paid"}}.dump());
                   }
                   lib_runs += static_cast<long>(per);
                   return;
                 }
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
  Side baseline{[&](int) { server.truncate(raw_table); },
                [&](int t, int r) {
                  auto& c = cycles[static_cast<std::size_t>(t)];
                  if (!c) c = std::make_unique<RawCycle>(server.conn(t));
                  long runs = 0;
                  for (std::size_t i = 0; i < per; ++i)
                    runs += c->run(id_of(r, t, i)) ? 1 : 0;
                  raw_runs += runs;
                }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, floor ? "report" : ">= 0.9");
  j["connections"] = threads;
  j["library_executions"] = lib_runs.load() / config.rounds_per_side();
  j["baseline_executions"] = raw_runs.load() / config.rounds_per_side();
  if (mix) {
    j["duplicates"] = 0.12;
    j["library"] = "run_once (no-op business); a duplicate replays the stored response";
    j["baseline"] = "INSERT + UPDATE; a duplicate's INSERT fails with ER_DUP_ENTRY and is skipped";
  } else if (floor) {
    j["library"] =
        "the library's statements through the bare C API: INSERT IGNORE ... RETURNING of the "
        "claim (where the server has it), fenced UPDATE of the record";
  } else {
    j["library"] = "run_once on fresh keys: claim, no-op business, commit of a small JSON";
    j["baseline"] = "prepared INSERT of the claim row + UPDATE to succeeded with the JSON";
  }
  emit(j);
}

// --- mysql.tx / mysql.tx_record_last ---------------------------------------------------------

std::string order_ddl(const std::string& table) {
  return fmt::format(
      "CREATE TABLE IF NOT EXISTS {} (order_id VARBINARY(64) NOT NULL PRIMARY KEY, amount BIGINT "
      "NOT NULL, created_at DATETIME(3) NOT NULL) ENGINE=InnoDB",
      table);
}

std::string order_insert_sql(const std::string& table) {
  return fmt::format(
      "INSERT INTO {} (order_id, amount, created_at) VALUES (?, ?, UTC_TIMESTAMP(3))", table);
}

// mysql.tx: the library's same-transaction mode. mysql.tx_floor: the library's own five
// statements (its SQL text, from idem::mysql::detail::make_record_sql) sent through the bare
// C API: the best any claim-first implementation can do on this server, so tx / tx_floor is
// what the library itself costs. mysql.tx_record_last: the record-last sketch. mysql.tx_own:
// mysql.tx on the caller's own handles (with_transaction on a lender, a borrowed MYSQL*, whose
// statements travel as text instead of as cached prepared statements).
enum class TxMode { library, floor, record_last, own };

void tx_scenario(const Config& config, TxMode mode) {
  const bool record_last = mode == TxMode::record_last;
  const std::string name = mode == TxMode::library ? "mysql.tx"
                           : mode == TxMode::floor ? "mysql.tx_floor"
                           : mode == TxMode::own   ? "mysql.tx_own"
                                                   : "mysql.tx_record_last";
  const int threads = config.threads > 0 ? config.threads : 32;
  std::atomic<long> bodies{0};
  Server server(config, threads);
  server.conn(0).query(order_ddl("bench_lib_order"));
  server.conn(0).query(order_ddl("bench_raw_order"));
  const std::size_t per = config.ops(5'000, 1'500) / threads;
  const std::size_t total = per * threads;
  const std::string lib_order = order_insert_sql("bench_lib_order");
  // The record-last pattern: the finished record is inserted after the business, in the same
  // transaction; a duplicate's INSERT fails (after waiting for the first transaction) and the
  // whole transaction rolls back.
  const std::string finished_insert = fmt::format(
      "INSERT INTO {} ({}) VALUES (?, ?, 1, 1, ?, ?, ?, 0, 1, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), "
      "UTC_TIMESTAMP(3), "
      "UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND)",
      lib_table, record_columns);

  const auto sql = idem::mysql::detail::make_record_sql(lib_table);
  const bool has_returning = server.pool->acquire()->supports_returning();
  auto floors = per_thread<FloorStatements>(threads);
  auto lib_orders = per_thread<RawStmt>(threads);
  auto floor = [&](int t, int r) {
    RawConn& c = server.conn(t);
    const auto slot = static_cast<std::size_t>(t);
    if (!floors[slot]) {
      floors[slot] = std::make_unique<FloorStatements>(c, sql, has_returning);
      lib_orders[slot] =
          std::make_unique<RawStmt>(c, lib_order, std::vector<Kind>{Kind::text, Kind::int64});
    }
    FloorStatements& f = *floors[slot];
    RawStmt& order = *lib_orders[slot];
    order[1].num = 100;
    for (std::size_t i = 0; i < per; ++i) {
      const std::string id = key_id(r, t, i);
      c.query("START TRANSACTION");
      f.claim_fresh(id);
      order[0].str = id;
      order.execute();
      f.complete_with(id, nlohmann::json{{"order", id}}.dump());
      c.query("COMMIT");
    }
  };
  Side library{[&](int) {
                 server.truncate(lib_table);
                 server.truncate("bench_lib_order");
               },
               [&](int t, int r) {
                 if (mode == TxMode::floor) return floor(t, r);
                 for (std::size_t i = 0; i < per; ++i) {
                   const std::string id = key_id(r, t, i);
                   auto in_transaction = [&](auto&& body) {
                     if (mode != TxMode::own)
                       return idem::mysql::with_transaction(*server.pool, body);
                     auto lend = [&](auto&& use) { return use(server.conn(t).native()); };
                     return idem::mysql::with_transaction(lend, body);
                   };
                   const bool ok = in_transaction([&](Connection& c) {
                     ++bodies;  // more bodies than transactions: some ran again
                     if (record_last) {
                       c.execute(lib_order, {id, 100});
                       const std::string snapshot = nlohmann::json{{"order", id}}.dump();
                       c.execute(finished_insert,
                                 {id, "BENCH", idem::detail::new_owner_token(), fixed_fingerprint(),
                                  idem::mysql::Param::blob(snapshot), micros(options.ttl)});
                       return true;
                     }
                     auto tx = server.store->bind(c);
                     auto out = idem::run_once(
                         tx, idem::Key{"BENCH", id}, fixed_fingerprint(),
                         [&] {
                           c.execute(lib_order, {id, 100});
                           return nlohmann::json{{"order", id}};
                         },
                         options);
                     return static_cast<bool>(out);
                   });
                   if (!ok) throw std::runtime_error("transaction did not succeed");
                 }
               }};
  auto orders = per_thread<RawStmt>(threads);
  Side baseline{[&](int) { server.truncate("bench_raw_order"); },
                [&](int t, int r) {
                  RawConn& c = server.conn(t);
                  auto& ins = orders[static_cast<std::size_t>(t)];
                  if (!ins)
                    ins = std::make_unique<RawStmt>(c, order_insert_sql("bench_raw_order"),
                                                    std::vector<Kind>{Kind::text, Kind::int64});
                  (*ins)[1].num = 100;
                  for (std::size_t i = 0; i < per; ++i) {
                    c.query("START TRANSACTION");
                    (*ins)[0].str = key_id(r, t, i);
                    ins->execute();
                    c.query("COMMIT");
                  }
                }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, mode == TxMode::library ? ">= 0.6" : "report");
  j["connections"] = threads;
  if (mode != TxMode::floor) {
    j["library_transaction_tries"] = bodies.load();
    j["library_transactions"] = total * static_cast<std::size_t>(config.rounds_per_side());
  }
  if (mode == TxMode::floor) {
    j["library"] =
        "the library's statements through the bare C API: START TRANSACTION, INSERT IGNORE ... "
        "RETURNING of the claim, business INSERT, fenced UPDATE of the record, COMMIT";
  } else if (record_last) {
    j["library"] =
        "record-last sketch on idem::mysql::Connection: START TRANSACTION, business INSERT, "
        "INSERT of the finished record, COMMIT (not a library API)";
  } else if (mode == TxMode::own) {
    j["library"] =
        "mysql.tx on the caller's own MYSQL* handles: with_transaction(lend) + store.bind(c) + "
        "run_once, every statement as text";
  } else {
    j["library"] =
        "with_transaction + store.bind(c) + run_once: START TRANSACTION, claim, business INSERT, "
        "commit of the record, COMMIT";
  }
  j["baseline"] = "START TRANSACTION, business INSERT, COMMIT (C API)";
  emit(j);
}

// --- mysql.batch ---------------------------------------------------------------------------

void batch_scenario(const Config& config) {
  const int threads = 4;  // consumers, each polling batches of `batch` messages
  const std::size_t batch = 100;
  auto pool =
      std::make_shared<Pool>(connection_params(config),
                             idem::mysql::PoolParams{.size = static_cast<std::size_t>(threads)});
  idem::mysql::Store store(
      pool, idem::mysql::StoreParams{.table = lib_table, .insert_returning = !config.read_back});
  store.ensure_schema();
  const std::size_t per = config.ops(10'000, 3'000) / threads / batch * batch;
  const std::size_t total = per * threads;
  auto truncate = [&](int) { pool->acquire()->query(fmt::format("TRUNCATE TABLE {}", lib_table)); };
  auto requests = [&](int r, int t, std::size_t first) {
    std::vector<idem::ClaimRequest> out;
    out.reserve(batch);
    for (std::size_t i = first; i < first + batch; ++i)
      out.push_back({idem::Key{"BENCH", key_id(r, t, i)}, fixed_fingerprint()});
    return out;
  };
  Side batched{truncate, [&](int t, int r) {
                 for (std::size_t first = 0; first < per; first += batch) {
                   const auto req = requests(r, t, first);
                   for (const auto& res : idem::claim_batch(store, req, options))
                     if (res.verdict != idem::Verdict::acquired)
                       throw std::runtime_error("not acquired");
                 }
               }};
  Side single{
      truncate, [&](int t, int r) {
        for (std::size_t first = 0; first < per; first += batch) {
          const auto req = requests(r, t, first);
          for (const auto& m : req)
            if (store.claim(m.key, m.fingerprint, options).verdict != idem::Verdict::acquired)
              throw std::runtime_error("not acquired");
        }
      }};
  const auto t =
      alternate("mysql.batch", config.rounds_per_side(), threads, total, batched, single);
  auto j = throughput_json("mysql.batch", threads, total, t, ">= 3");
  j["connections"] = threads;
  j["batch"] = batch;
  j["library"] = "idem::claim_batch of 100 messages (mysql::Store: one INSERT IGNORE + one read)";
  j["baseline"] = "store.claim once per message (INSERT + read back each)";
  emit(j);
}

// --- mysql.storm ---------------------------------------------------------------------------

void storm_scenario(const Config& config) {
  const int callers = 200;
  const int keys = 50;
  const auto business = std::chrono::milliseconds{2};  // the guarded call, e.g. to a channel
  const int rounds = config.quick ? 1 : 3;
  Server server(config, callers);

  struct StormResult {
    long executions = 0;
    std::vector<double> dup_ms;  // latency of every duplicate's answer
    double seconds = 0;
  };
  auto storm = [&](bool lib, int r, int key_count) {
    StormResult res;
    std::atomic<long> executions{0};
    std::vector<std::vector<double>> lat(callers);
    std::barrier sync(callers);
    std::vector<std::unique_ptr<RawCycle>> cycles(callers);
    std::vector<std::unique_ptr<RawKeyed>> reads(callers);
    server.truncate(lib ? lib_table : raw_table);
    res.seconds = run_parallel(callers, [&](int t) {
      const auto k = static_cast<std::size_t>(t);
      if (!lib) {
        cycles[k] = std::make_unique<RawCycle>(server.conn(t));
        reads[k] = std::make_unique<RawKeyed>(server.conn(t), raw_select_sql(raw_table),
                                              std::vector<Kind>{});
        reads[k]->stmt[1].str = "BENCH";
      }
      for (int key = 0; key < key_count; ++key) {
        sync.arrive_and_wait();
        const std::string id = fmt::format("storm-r{}-{}", r, key);
        const auto t0 = Clock::now();
        bool executed = false;
        if (lib) {
          auto out = idem::run_once(
              *server.store, idem::Key{"BENCH", id}, fixed_fingerprint(),
              [&] {
                executed = true;
                std::this_thread::sleep_for(business);
                return nlohmann::json{{"status", "paid"}};
              },
              options);
          (void)out;  // replayed or in_progress: either is the duplicate's answer
        } else {
          // Raw: INSERT; the winner runs the business and UPDATEs, a loser reads the row.
          if (cycles[k]->insert.execute(id)) {
            executed = true;
            std::this_thread::sleep_for(business);
            cycles[k]->complete.stmt[0].str = nlohmann::json{{"status", "paid"}}.dump();
            cycles[k]->complete.stmt[1].str = id;
            cycles[k]->complete.stmt.execute();
          } else {
            reads[k]->stmt[0].str = id;
            reads[k]->stmt.query();
          }
        }
        if (executed) {
          ++executions;
        } else {
          lat[k].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
      }
    });
    res.executions = executions.load();
    for (auto& v : lat)
      res.dup_ms.insert(res.dup_ms.end(), v.begin(), v.end());
    return res;
  };

  // Untimed warm-up: every connection prepares its statements once.
  storm(false, -1, 2);
  storm(true, -1, 2);
  const double load_before = load_average();
  std::vector<double> lib_p50, lib_p99, raw_p50, raw_p99;
  std::vector<long> lib_exec, raw_exec;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool lib = (r + k) % 2 == 1;
      const StormResult s = storm(lib, r, keys);
      const double p50 = percentile(s.dup_ms, 0.50);
      const double p99 = percentile(s.dup_ms, 0.99);
      (lib ? lib_p50 : raw_p50).push_back(p50);
      (lib ? lib_p99 : raw_p99).push_back(p99);
      (lib ? lib_exec : raw_exec).push_back(s.executions);
      progress(
          fmt::format("mysql.storm round {} {}: {} executions, duplicates p50 {:.2f} ms p99 "
                      "{:.2f} ms ({:.2f} s)",
                      r + 1, lib ? "library " : "baseline", s.executions, p50, p99, s.seconds));
    }
  }
  nlohmann::json j;
  j["scenario"] = "mysql.storm";
  j["threads"] = callers;
  j["connections"] = callers;
  j["keys"] = keys;
  j["operations"] = callers * keys;  // per round and side
  j["rounds"] = rounds;
  j["business_ms"] = business.count();
  j["library_executions"] = lib_exec;
  j["baseline_executions"] = raw_exec;
  j["library_dup_p50_ms"] = round_to(median(lib_p50), 3);
  j["library_dup_p99_ms"] = round_to(median(lib_p99), 3);
  j["baseline_dup_p50_ms"] = round_to(median(raw_p50), 3);
  j["baseline_dup_p99_ms"] = round_to(median(raw_p99), 3);
  const double lp99 = median(lib_p99);
  j["ratio"] = lp99 > 0 ? round_to(median(raw_p99) / lp99, 3) : 0.0;
  j["ratio_of"] = "baseline p99 / library p99 of the duplicates' answers";
  j["goal"] = "library executions == 50 per round";
  j["library"] = "run_once, 200 callers per key at once, business 2 ms, no wait";
  j["baseline"] = "INSERT; the winner runs and UPDATEs, the others SELECT the row";
  j["load_avg"] = {round_to(load_before, 2), round_to(load_average(), 2)};
  emit(j);
}

// --- mysql.big_table -----------------------------------------------------------------------

void big_table_scenario(const Config& config) {
  const long rows = config.big_rows > 0 ? config.big_rows : (config.quick ? 100'000 : 1'000'000);
  const int threads = 8;
  const std::size_t purge_batch = config.purge_batch > 0 ? config.purge_batch : 1000;
  const double phase_s = config.quick ? 4.0 : 15.0;
  auto pool = std::make_shared<Pool>(connection_params(config),
                                     idem::mysql::PoolParams{.size = threads + 1});
  idem::mysql::Store store(
      pool, idem::mysql::StoreParams{.table = "bench_big", .insert_returning = !config.read_back});
  store.ensure_schema();
  {
    auto c = pool->acquire();
    c->query("TRUNCATE TABLE bench_big");
    progress(fmt::format("mysql.big_table: inserting {} expired rows", rows));
    const auto t0 = Clock::now();
    for (long done = 0; done < rows;) {
      const long n = std::min<long>(100'000, rows - done);
      // MariaDB's sequence engine makes the rows; expired a day ago, like a backlog of old keys.
      c->query(fmt::format(
          "INSERT INTO bench_big ({}) SELECT CONCAT('old-', seq), 'BENCH', 1, 1, REPEAT('0', 32), "
          "REPEAT('a', 64), '{{\"status\":\"paid\"}}', 0, 1, UTC_TIMESTAMP(3) - INTERVAL 8 DAY, "
          "UTC_TIMESTAMP(3) - INTERVAL 8 DAY, UTC_TIMESTAMP(3) - INTERVAL 8 DAY, UTC_TIMESTAMP(3) "
          "- INTERVAL 1 DAY "
          "FROM seq_{}_to_{}",
          record_columns, done + 1, done + n));
      done += n;
    }
    progress(fmt::format("mysql.big_table: inserted in {:.1f} s", seconds_since(t0)));
  }

  // Claims on fresh keys from `threads` threads until stop; their latencies in ms.
  auto claims = [&](const std::string& phase, std::atomic<bool>& stop) {
    std::vector<std::vector<double>> lat(threads);
    run_parallel(threads, [&](int t) {
      for (std::size_t i = 0; !stop.load(); ++i) {
        const auto t0 = Clock::now();
        store.claim(idem::Key{"BENCH", fmt::format("{}-{}-{}", phase, t, i)}, fixed_fingerprint(),
                    options);
        lat[static_cast<std::size_t>(t)].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
    std::vector<double> all;
    for (auto& v : lat)
      all.insert(all.end(), v.begin(), v.end());
    return all;
  };

  const double load_before = load_average();
  std::atomic<bool> stop{false};
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(phase_s));
    stop = true;
  });
  const auto before = claims("before", stop);
  timer.join();

  stop = false;
  std::size_t purged = 0;
  double purge_s = 0;
  const auto pause = std::chrono::milliseconds{config.purge_pause_ms};
  std::thread purger([&] {
    const auto t0 = Clock::now();
    if (pause.count() == 0) {
      // What a Janitor does, round after round: DELETEs of 1000 rows until none is left.
      while (true) {
        const std::size_t n = store.purge_expired(purge_batch, 100);
        purged += n;
        if (n < purge_batch * 100) break;
      }
    } else {
      // A paced idem::Janitor (purge_pause between DELETEs), rounds back to back.
      idem::Janitor janitor(store, {.interval = std::chrono::milliseconds{0},
                                    .purge_batch = purge_batch,
                                    .purge_max_batches = 100,
                                    .purge_pause = pause});
      while (janitor.stats().purged < static_cast<std::uint64_t>(rows))
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
      purged = janitor.stats().purged;
    }
    purge_s = seconds_since(t0);
    stop = true;
  });
  const auto during = claims("during", stop);
  purger.join();

  const double p99_before = percentile(before, 0.99);
  const double p99_during = percentile(during, 0.99);
  nlohmann::json j;
  j["scenario"] = "mysql.big_table";
  j["threads"] = threads;
  j["expired_rows"] = rows;
  if (config.quick && config.big_rows == 0)
    j["note"] = "--quick: 100,000 expired rows instead of 1,000,000";
  j["operations"] = before.size() + during.size();
  j["claims_before"] = before.size();
  j["claims_during"] = during.size();
  j["p50_before_ms"] = round_to(percentile(before, 0.5), 3);
  j["p99_before_ms"] = round_to(p99_before, 3);
  j["p50_during_purge_ms"] = round_to(percentile(during, 0.5), 3);
  j["p99_during_purge_ms"] = round_to(p99_during, 3);
  j["library_ops_s"] = round_to(static_cast<double>(during.size()) / purge_s, 1);
  j["baseline_ops_s"] = round_to(static_cast<double>(before.size()) / phase_s, 1);
  j["purged_rows"] = purged;
  j["purge_batch"] = purge_batch;
  j["purge_pause_ms"] = config.purge_pause_ms;
  j["purge_rows_s"] = round_to(static_cast<double>(purged) / purge_s, 1);
  j["purge_s"] = round_to(purge_s, 2);
  j["ratio"] = p99_before > 0 ? round_to(p99_during / p99_before, 3) : 0.0;
  j["ratio_of"] = "claim p99 while purge_expired runs / claim p99 before";
  j["goal"] = "<= 1.5";
  j["library"] =
      pause.count() == 0
          ? fmt::format("claims on fresh keys while purge_expired({}, 100) runs to the end",
                        purge_batch)
          : fmt::format(
                "claims on fresh keys while a Janitor (purge_batch {}, purge_pause {} ms) "
                "purges to the end",
                purge_batch, pause.count());
  j["baseline"] = "the same claims on the same table before the purge";
  j["load_avg"] = {round_to(load_before, 2), round_to(load_average(), 2)};
  emit(j);
  pool->acquire()->query("DROP TABLE IF EXISTS bench_big");
}

}  // namespace

int run_mysql(const Config& config, const Selected& selected) {
  const std::vector<std::pair<std::string, std::function<void()>>> scenarios = {
      {"mysql.claim", [&] { claim_scenario(config, false); }},
      {"mysql.claim_floor", [&] { claim_scenario(config, true); }},
      {"mysql.returning", [&] { returning_scenario(config, false); }},
      {"mysql.returning_dup", [&] { returning_scenario(config, true); }},
      {"mysql.cycle", [&] { cycle_scenario(config, false); }},
      {"mysql.cycle_floor", [&] { cycle_scenario(config, false, true); }},
      {"mysql.mix", [&] { cycle_scenario(config, true); }},
      {"mysql.tx", [&] { tx_scenario(config, TxMode::library); }},
      {"mysql.tx_floor", [&] { tx_scenario(config, TxMode::floor); }},
      {"mysql.tx_record_last", [&] { tx_scenario(config, TxMode::record_last); }},
      {"mysql.tx_own", [&] { tx_scenario(config, TxMode::own); }},
      {"mysql.batch", [&] { batch_scenario(config); }},
      {"mysql.storm", [&] { storm_scenario(config); }},
      {"mysql.big_table", [&] { big_table_scenario(config); }},
  };
  int failed = 0;
  for (const auto& [name, run] : scenarios) {
    if (!selected(name)) continue;
    if (config.socket.empty()) {
      progress(name + ": error: needs --socket (scripts/bench starts a server and passes it)");
      ++failed;
      continue;
    }
    failed += attempt(name, run);
  }
  return failed;
}

}  // namespace bench
