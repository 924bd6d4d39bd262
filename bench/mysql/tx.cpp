// mysql.tx, mysql.tx_claim_first, mysql.tx_floor, mysql.tx_own, mysql.tx_handwritten.
#include "shared.hpp"

namespace bench::mysql_bench {

namespace {

// record_last's statements sent through the bare C API, on a session with autocommit off as
// with_transaction keeps it: the read of the key, the business INSERT, and the INSERT of the
// finished record with the COMMIT (one compound statement).
struct RecordLastFloor {
  RawConn& conn;
  RawStmt probe, order, record;
  RecordLastFloor(RawConn& c, const idem::mysql::detail::RecordSql& sql,
                  const std::string& order_sql)
      : conn(c),
        probe(c, sql.probe, {Kind::text, Kind::text}),
        order(c, order_sql, {Kind::text, Kind::int64}),
        record(c, sql.insert_finished_commit,
               {Kind::text, Kind::text, Kind::int64, Kind::int64, Kind::text, Kind::text,
                Kind::blob, Kind::int64, Kind::int64, Kind::text, Kind::text, Kind::text,
                Kind::null, Kind::null, Kind::null}) {
    if (mysql_autocommit(c.native(), 0) != 0) throw std::runtime_error("autocommit off failed");
    probe[1].str = "BENCH";
    order[1].num = 100;
    record[1].str = "BENCH";
    record[2].num = static_cast<int>(idem::Status::succeeded);
    record[3].num = 1;
    record[4].str = std::string(32, 'f');
    record[5].str = fixed_fingerprint();
    record[7].num = 0;
    record[8].num = 1;
  }
  ~RecordLastFloor() { mysql_autocommit(conn.native(), 1); }
  void run(const std::string& id) {
    probe[0].str = id;
    if (probe.query() != 1) throw std::runtime_error("the floor's read returned no row");
    order[0].str = id;
    order.execute();
    record[0].str = id;
    record[6].str = nlohmann::json{{"order", id}}.dump();
    // Times as the library writes them: the read's now, a lease and a ttl after it.
    record[9].str = "2026-01-01 00:00:30.000";
    record[10].str = "2026-01-01 00:00:00.000";
    record[11].str = "2026-01-08 00:00:00.000";
    record.execute();  // a duplicate key would throw
  }
};

}  // namespace

void tx_scenario(const Config& config, TxMode mode) {
  const std::string name = mode == TxMode::library ? "mysql.tx"
                           : mode == TxMode::floor ? "mysql.tx_floor"
                           : mode == TxMode::own   ? "mysql.tx_own"
                                                   : "mysql.tx_claim_first";
  const int threads = config.threads > 0 ? config.threads : 32;
  std::atomic<long> bodies{0};
  Server server(config, threads);
  const idem::mysql::Store claim_first_store(
      {.table = lib_table, .bound_claim = idem::BoundClaim::claim_first});
  const idem::mysql::Store& bound_store =
      mode == TxMode::claim_first ? claim_first_store : *server.store;
  server.conn(0).query(business_order_ddl("bench_lib_order"));
  server.conn(0).query(business_order_ddl("bench_raw_order"));
  const std::size_t per = steady_round_operations / threads;
  const std::size_t total = per * threads;
  const std::string lib_order = business_order_insert_sql("bench_lib_order");

  const auto sql = idem::mysql::detail::make_record_sql(lib_table);
  auto floors = per_thread<RecordLastFloor>(threads);
  auto floor = [&](int t, int r) {
    auto& f = floors[static_cast<std::size_t>(t)];
    if (!f) f = std::make_unique<RecordLastFloor>(server.conn(t), sql, lib_order);
    for (std::size_t i = 0; i < per; ++i)
      f->run(key_id(r, t, i));
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
                     return bound_order_request(c, bound_store, id, lib_order);
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
                    ins = std::make_unique<RawStmt>(c, business_order_insert_sql("bench_raw_order"),
                                                    std::vector<Kind>{Kind::text, Kind::int64});
                  (*ins)[1].num = 100;
                  for (std::size_t i = 0; i < per; ++i) {
                    c.query("START TRANSACTION");
                    (*ins)[0].str = key_id(r, t, i);
                    ins->execute();
                    c.query("COMMIT");
                  }
                }};
  const auto t = alternate(name, steady_rounds(config), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, mode == TxMode::library ? ">= 0.6" : "report");
  j["connections"] = threads;
  if (mode != TxMode::floor) {
    j["library_transaction_tries"] = bodies.load();
    j["library_transactions"] = total * static_cast<std::size_t>(steady_rounds(config));
  }
  if (mode == TxMode::floor) {
    j["library"] =
        "record_last's statements through the bare C API (autocommit off): read of the key, "
        "business INSERT, INSERT of the finished record with the COMMIT (one compound "
        "statement)";
  } else if (mode == TxMode::claim_first) {
    j["library"] =
        "mysql.tx with StoreParams::bound_claim = claim_first: (autocommit off, kept between "
        "transactions) INSERT IGNORE ... RETURNING of the claim, business INSERT, fenced UPDATE of "
        "the record, COMMIT";
  } else if (mode == TxMode::own) {
    j["library"] =
        "mysql.tx on the caller's own MYSQL* handles: with_transaction(lend) + store.bind(c) + "
        "run_once, every statement as text";
  } else {
    j["library"] =
        "with_transaction + store.bind(c) + run_once (record_last): (autocommit off, kept "
        "between transactions) read of the key, business INSERT, INSERT of the finished record "
        "with the COMMIT";
  }
  j["baseline"] = "START TRANSACTION, business INSERT, COMMIT (C API)";
  emit(j);
}

// --- mysql.tx_handwritten ------------------------------------------------------------------

namespace {

// What a service writes when it dedups by hand inside its business transaction: a narrow row
// per key, the response stored beside it.
std::string dedup_ddl(const std::string& table) {
  return fmt::format(
      "CREATE TABLE IF NOT EXISTS {} (dedup_key VARBINARY(64) NOT NULL, biz_type VARBINARY(32) "
      "NOT NULL, response BLOB NULL, PRIMARY KEY (dedup_key, biz_type)) ENGINE=InnoDB",
      table);
}

// The hand-written request, through the bare C API: START TRANSACTION, INSERT the dedup row
// (a duplicate key: ROLLBACK, read the stored response, replay it), the business INSERT, an
// UPDATE storing the response, COMMIT; the whole transaction again on a deadlock or a lock
// wait timeout.
struct Handwritten {
  RawConn& conn;
  RawStmt claim, order, store, replay;
  explicit Handwritten(RawConn& c)
      : conn(c),
        claim(c, "INSERT INTO bench_dedup (dedup_key, biz_type) VALUES (?, 'BENCH')", {Kind::text}),
        order(c, business_order_insert_sql("bench_raw_order"), {Kind::text, Kind::int64}),
        store(c, "UPDATE bench_dedup SET response = ? WHERE dedup_key = ? AND biz_type = 'BENCH'",
              {Kind::blob, Kind::text}),
        replay(c, "SELECT response FROM bench_dedup WHERE dedup_key = ? AND biz_type = 'BENCH'",
               {Kind::text}) {
    order[1].num = 100;
  }
  // Returns whether the business ran.
  bool run(const std::string& id) {
    for (int attempt = 1;; ++attempt) {
      try {
        conn.query("START TRANSACTION");
        claim[0].str = id;
        if (claim.execute(true) < 0) {
          conn.query("ROLLBACK");
          replay[0].str = id;
          if (replay.query() != 1) throw std::runtime_error("handwritten: no row to replay");
          return false;
        }
        order[0].str = id;
        order.execute();
        store[0].str = nlohmann::json{{"order", id}}.dump();
        store[1].str = id;
        if (store.execute() != 1) throw std::runtime_error("handwritten: the UPDATE missed");
        conn.query("COMMIT");
        return true;
      } catch (const std::exception&) {
        const unsigned code = mysql_errno(conn.native());
        conn.query("ROLLBACK");
        if ((code != er_lock_deadlock && code != 1205) || attempt == 8) throw;
      }
    }
  }
};

}  // namespace

void tx_handwritten_scenario(const Config& config) {
  const std::string name = "mysql.tx_handwritten";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  server.conn(0).query(business_order_ddl("bench_lib_order"));
  server.conn(0).query(business_order_ddl("bench_raw_order"));
  server.conn(0).query(dedup_ddl("bench_dedup"));
  const std::size_t per = steady_round_operations / threads;
  const std::size_t total = per * threads;
  const std::string lib_order = business_order_insert_sql("bench_lib_order");
  std::atomic<long> lib_runs{0}, raw_runs{0}, bodies{0};
  Side library{[&](int) {
                 server.truncate(lib_table);
                 server.truncate("bench_lib_order");
               },
               [&](int t, int r) {
                 long runs = 0;
                 for (std::size_t i = 0; i < per; ++i) {
                   const std::string id = mix_key_id(r, t, i);
                   const auto out = idem::mysql::with_transaction(*server.pool, [&](Connection& c) {
                     ++bodies;
                     auto tx = server.store->bind(c);
                     return idem::run_once(
                         tx, idem::Key{"BENCH", id}, fixed_fingerprint(),
                         [&] {
                           ++runs;
                           c.execute(lib_order, {id, 100});
                           return nlohmann::json{{"order", id}};
                         },
                         options);
                   });
                   if (!out) throw std::runtime_error("neither acquired nor replayed");
                 }
                 lib_runs += runs;
               }};
  auto hand = per_thread<Handwritten>(threads);
  Side baseline{[&](int) {
                  server.truncate("bench_dedup");
                  server.truncate("bench_raw_order");
                },
                [&](int t, int r) {
                  auto& h = hand[static_cast<std::size_t>(t)];
                  if (!h) h = std::make_unique<Handwritten>(server.conn(t));
                  long runs = 0;
                  for (std::size_t i = 0; i < per; ++i)
                    runs += h->run(mix_key_id(r, t, i)) ? 1 : 0;
                  raw_runs += runs;
                }};
  const auto t = alternate(name, steady_rounds(config), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, ">= 1.0");
  j["connections"] = threads;
  j["duplicates"] = 0.12;
  j["library_executions"] = lib_runs.load() / steady_rounds(config);
  j["baseline_executions"] = raw_runs.load() / steady_rounds(config);
  j["library_transaction_tries"] = bodies.load();
  j["library"] =
      "with_transaction + store.bind(c) + run_once, the default record_last: (autocommit off, "
      "kept between transactions) read of the key (a duplicate replays it), business INSERT, "
      "INSERT of the finished record with the COMMIT";
  j["baseline"] =
      "hand-written dedup (C API): START TRANSACTION, INSERT of a narrow dedup row (a duplicate: "
      "ROLLBACK and SELECT of the stored response), business INSERT, UPDATE storing the "
      "response, COMMIT; again on 1213/1205";
  emit(j);
}

}  // namespace bench::mysql_bench
