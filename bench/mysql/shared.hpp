#pragma once
// What the mysql.* scenarios share: the tables, a connected Server, and the raw statements of
// the baselines and floors.
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

#include "../raw_mysql.hpp"
#include "scenarios.hpp"

namespace bench::mysql_bench {

using idem::mysql::Connection;
using idem::mysql::Pool;
using Kind = RawStmt::Slot::Kind;

inline constexpr const char* lib_table = "bench_lib";
inline constexpr const char* raw_table = "bench_raw";
inline constexpr const char* record_columns =
    "idempotent_key, biz_type, status, fence, owner_token, request_hash, response_snapshot, "
    "retryable, attempts, lease_until, created_at, updated_at, expire_at";

inline idem::mysql::ConnectionParams connection_params(const Config& config) {
  idem::mysql::ConnectionParams p;
  p.unix_socket = config.socket;
  p.user = config.user;
  p.password = config.password;
  p.database = config.database;
  return p;
}

// The library's MySQL stores in the mysql.* scenarios: the table, and RETURNING unless
// --read-back.
inline idem::mysql::StoreParams store_params(const Config& config) {
  return idem::mysql::StoreParams{.table = lib_table, .insert_returning = !config.read_back};
}

inline std::int64_t micros(idem::Duration d) {
  return static_cast<std::int64_t>(d.count()) * 1000;
}

// The row idem::mysql inserts for a claim, written by hand: what a bare INSERT costs.
inline std::string raw_insert_sql(const std::string& table, const std::string& tail = "") {
  return fmt::format(
      "INSERT INTO {} ({}) VALUES (?, ?, 0, 1, ?, ?, NULL, 0, 1, UTC_TIMESTAMP(3) + INTERVAL ? "
      "MICROSECOND, "
      "UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND){}",
      table, record_columns, tail);
}

// The library's read-back, written by hand.
inline std::string raw_select_sql(const std::string& table) {
  return fmt::format(
      "SELECT {}, UTC_TIMESTAMP(3) FROM {} WHERE idempotent_key = ? AND biz_type = ?",
      record_columns, table);
}

inline std::string raw_complete_sql(const std::string& table) {
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
    store = std::make_unique<idem::mysql::Store>(pool, store_params(c));
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

inline const idem::Options options{};

// Rounds of the scenarios whose ratio moved the most between runs (same-transaction, coroutine
// stores), --quick or not: on two cores, rounds much shorter than a second, or fewer than
// five, left the median ratio far from what longer runs of the same code measure
// (docs/performance.md, "Same-transaction speed, reproducibly").
inline constexpr std::size_t steady_round_operations = 5'000;
inline int steady_rounds(const Config& config) {
  return config.rounds > 0 ? config.rounds : 5;
}

// --- the same-transaction scenarios' business ------------------------------------------------

// The business of the same-transaction scenarios: an order row, written in the transaction
// that holds the claim.
inline std::string business_order_ddl(const std::string& table) {
  return fmt::format(
      "CREATE TABLE IF NOT EXISTS {} (order_id VARBINARY(64) NOT NULL PRIMARY KEY, amount BIGINT "
      "NOT NULL, created_at DATETIME(3) NOT NULL) ENGINE=InnoDB",
      table);
}

inline std::string business_order_insert_sql(const std::string& table) {
  return fmt::format(
      "INSERT INTO {} (order_id, amount, created_at) VALUES (?, ?, UTC_TIMESTAMP(3))", table);
}

// One request of mysql.tx's library side, in the transaction on `c`: the store bound to it,
// run_once whose business INSERTs the order. True when it ran or replayed.
inline bool bound_order_request(Connection& c, const idem::mysql::Store& store,
                                const std::string& id, const std::string& order_sql) {
  auto tx = store.bind(c);
  auto out = idem::run_once(
      tx, idem::Key{"BENCH", id}, fixed_fingerprint(),
      [&] {
        c.execute(order_sql, {id, 100});
        return nlohmann::json{{"order", id}};
      },
      options);
  return static_cast<bool>(out);
}

// --- mysql.cycle ---------------------------------------------------------------------------

// mysql.cycle's request on the blocking store, `per` times in this thread on keys id_of(i):
// run_once, the no-op business, the commit. Returns the executions. mysql.cycle's and
// mysql.mix's library side, and mysql.async_cycle's baseline.
template <class IdOf>
long blocking_cycles(idem::mysql::Store& store, std::size_t per, IdOf id_of) {
  long runs = 0;
  for (std::size_t i = 0; i < per; ++i) {
    auto out = idem::run_once(store, idem::Key{"BENCH", id_of(i)}, fixed_fingerprint(),
                              PaidBusiness{&runs}, options);
    if (!out) throw std::runtime_error("neither acquired nor replayed");
  }
  return runs;
}

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

}  // namespace bench::mysql_bench
