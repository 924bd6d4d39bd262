// mysql.tx, mysql.tx_floor, mysql.tx_record_last, mysql.tx_own.
#include "shared.hpp"

namespace bench::mysql_bench {

namespace {

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

}  // namespace

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

}  // namespace bench::mysql_bench
