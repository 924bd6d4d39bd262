// mysql.steps (issue 26): a business of three steps with recovery points against the same steps
// hand-written in the shape of the well-known Postgres/Stripe design (a key row with a
// recovery point, one transaction per local step that also moves the recovery point).
// mysql.cycle_resolvers: run_once with a resolver registered, against run_once without, when
// no record is stale (what the resolver costs on the claim path).
#include "shared.hpp"

#include <idem/attempt.hpp>
#include <idem/resolver.hpp>

namespace bench::mysql_bench {

namespace {

std::string order_ddl(const std::string& table) {
  return fmt::format(
      "CREATE TABLE IF NOT EXISTS {} (order_id VARBINARY(64) NOT NULL PRIMARY KEY, amount BIGINT "
      "NOT NULL, status TINYINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
      table);
}

// The hand-written key table of the Stripe-style design: the key, the request it was first
// sent with (a duplicate with another request is refused), its lock (a duplicate while it is
// held is refused), its recovery point, the charge of the remote step and the final response.
// The key is the primary key (the design's surrogate id and unique index would cost the
// baseline a secondary index).
std::string keys_ddl(const std::string& table) {
  return fmt::format(
      "CREATE TABLE IF NOT EXISTS {} (idem_key VARBINARY(64) NOT NULL PRIMARY KEY, "
      "request_hash VARCHAR(128) NOT NULL, locked_at DATETIME(3) NULL, "
      "recovery_point VARCHAR(16) NOT NULL, charge_id BIGINT NULL, response BLOB NULL) "
      "ENGINE=InnoDB",
      table);
}

// The remote step of both sides: a charge at a gateway, here a counter (what it costs is the
// gateway's, the same for both sides).
std::atomic<long> charges{0};

// The hand-written request (C API): INSERT the key row with the request and the lock (a
// duplicate: read it; another request or a held lock is refused, a finished one replayed);
// phase 1 in a transaction: the order row and the recovery point 'reserved'; phase 2: the
// charge, then the recovery point 'charged' with the charge id; phase 3 in a transaction: the
// order marked paid and the recovery point 'finished' with the response, the lock released.
// A phase again on a deadlock or a lock wait timeout.
struct Handwritten {
  RawConn& conn;
  RawStmt insert_key, read_key, insert_order, reserved, charged, mark_paid, finished;
  explicit Handwritten(RawConn& c)
      : conn(c),
        insert_key(c,
                   "INSERT INTO bench_step_keys (idem_key, request_hash, locked_at, "
                   "recovery_point) VALUES (?, ?, UTC_TIMESTAMP(3), 'started')",
                   {Kind::text, Kind::text}),
        read_key(c,
                 "SELECT recovery_point, request_hash, locked_at > UTC_TIMESTAMP(3) - INTERVAL "
                 "90 SECOND, response FROM bench_step_keys WHERE idem_key = ?",
                 {Kind::text}),
        insert_order(c, "INSERT INTO bench_raw_step_order (order_id, amount) VALUES (?, 100)",
                     {Kind::text}),
        reserved(c, "UPDATE bench_step_keys SET recovery_point = 'reserved' WHERE idem_key = ?",
                 {Kind::text}),
        charged(c,
                "UPDATE bench_step_keys SET recovery_point = 'charged', charge_id = ? WHERE "
                "idem_key = ?",
                {Kind::int64, Kind::text}),
        mark_paid(c, "UPDATE bench_raw_step_order SET status = 1 WHERE order_id = ?", {Kind::text}),
        finished(c,
                 "UPDATE bench_step_keys SET recovery_point = 'finished', response = ?, "
                 "locked_at = NULL WHERE idem_key = ?",
                 {Kind::blob, Kind::text}) {}

  // Returns whether the business ran.
  bool run(const std::string& id) {
    insert_key[0].str = id;
    insert_key[1].str = fixed_fingerprint();
    if (phase([&] { return insert_key.execute(true); }) < 0) {
      read_key[0].str = id;
      if (read_key.query() != 1) throw std::runtime_error("handwritten: no key row");
      if (read_key.column(1) != fixed_fingerprint())
        throw std::runtime_error("handwritten: another request");
      if (read_key.column(2) == "1") throw std::runtime_error("handwritten: in progress");
      // The bench has no crashed attempts to resume: a duplicate finds its key finished.
      if (read_key.column(0) != "finished") throw std::runtime_error("handwritten: unfinished");
      return false;
    }
    phase([&] {
      conn.query("START TRANSACTION");
      insert_order[0].str = id;
      insert_order.execute();
      reserved[0].str = id;
      reserved.execute();
      conn.query("COMMIT");
      return 0LL;
    });
    charged[0].num = ++charges;
    charged[1].str = id;
    phase([&] { return charged.execute(); });
    phase([&] {
      conn.query("START TRANSACTION");
      mark_paid[0].str = id;
      mark_paid.execute();
      finished[0].str = nlohmann::json{{"order", id}}.dump();
      finished[1].str = id;
      finished.execute();
      conn.query("COMMIT");
      return 0LL;
    });
    return true;
  }

 private:
  // One phase, again on a deadlock or a lock wait timeout (its transaction rolled back).
  template <class F>
  long long phase(F&& f) {
    for (int attempt = 1;; ++attempt) {
      try {
        return f();
      } catch (const std::exception&) {
        const unsigned code = mysql_errno(conn.native());
        conn.query("ROLLBACK");
        if ((code != er_lock_deadlock && code != 1205) || attempt == 8) throw;
      }
    }
  }
};

}  // namespace

void steps_scenario(const Config& config) {
  const std::string name = "mysql.steps";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  server.conn(0).query(order_ddl("bench_lib_step_order"));
  server.conn(0).query(order_ddl("bench_raw_step_order"));
  server.conn(0).query("DROP TABLE IF EXISTS bench_step_keys");  // an earlier layout
  server.conn(0).query(keys_ddl("bench_step_keys"));
  const std::size_t per = config.ops(3'000, 1'000) / threads;
  const std::size_t total = per * threads;
  const std::string insert_order =
      "INSERT INTO bench_lib_step_order (order_id, amount) VALUES (?, 100)";
  const std::string mark_paid = "UPDATE bench_lib_step_order SET status = 1 WHERE order_id = ?";
  std::atomic<long> lib_runs{0}, raw_runs{0};
  using Attempt = idem::Attempt<idem::mysql::Store>;
  // The service's own connections for its business transactions, apart from the store's
  // (autocommit stays off on them between transactions, as on any connection only
  // with_transaction uses): what a service that runs local steps has.
  Pool business(connection_params(config),
                idem::mysql::PoolParams{.size = static_cast<std::size_t>(threads)});

  Side library{[&](int) {
                 server.truncate(lib_table);
                 server.truncate("bench_lib_step_order");
               },
               [&](int t, int r) {
                 long runs = 0;
                 for (std::size_t i = 0; i < per; ++i) {
                   const std::string id = mix_key_id(r, t, i);
                   // A local step: its row and its recovery point in one transaction.
                   auto local = [&](Attempt& a, const char* step, const std::string& sql) {
                     idem::mysql::with_transaction(business, [&](Connection& c) {
                       auto tx = server.store->bind(c);
                       return a.step(tx, step, [&] {
                         c.execute(sql, {id});
                         return 1;
                       });
                     });
                   };
                   const auto out = idem::run_once(
                       *server.store, idem::Key{"BENCH", id}, fixed_fingerprint(),
                       [&](Attempt& a) {
                         ++runs;
                         local(a, "reserve", insert_order);
                         const long charge = a.step("charge", [] { return ++charges; });
                         // The last phase: the order marked paid and the record completed
                         // in one transaction.
                         return idem::mysql::with_transaction(business, [&](Connection& c) {
                           auto tx = server.store->bind(c);
                           c.execute(mark_paid, {id});
                           return a.complete(tx, nlohmann::json{{"order", id}, {"charge", charge}});
                         });
                       },
                       options);
                   if (!out) throw std::runtime_error("neither acquired nor replayed");
                 }
                 lib_runs += runs;
               }};
  auto hand = per_thread<Handwritten>(threads);
  Side baseline{[&](int) {
                  server.truncate("bench_step_keys");
                  server.truncate("bench_raw_step_order");
                },
                [&](int t, int r) {
                  auto& h = hand[static_cast<std::size_t>(t)];
                  if (!h) h = std::make_unique<Handwritten>(server.conn(t));
                  long runs = 0;
                  for (std::size_t i = 0; i < per; ++i)
                    runs += h->run(mix_key_id(r, t, i)) ? 1 : 0;
                  raw_runs += runs;
                }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, ">= 0.9");
  j["connections"] = threads;
  j["duplicates"] = 0.12;
  j["library_executions"] = lib_runs.load() / config.rounds_per_side();
  j["baseline_executions"] = raw_runs.load() / config.rounds_per_side();
  j["library"] =
      "run_once on the standalone store with an Attempt: step 'reserve' (with_transaction on "
      "the service's own pool: order INSERT, recovery point), step "
      "'charge' (a counter, its recovery point), the last phase in with_transaction: order "
      "UPDATE and the record completed (Attempt::complete)";
  j["baseline"] =
      "Stripe-style by hand (C API): INSERT of the key row with the request and the lock (a "
      "duplicate: read it, check the request and the lock), a "
      "transaction with the order INSERT and the recovery point, the charge and its recovery "
      "point, a transaction with the order UPDATE and the final recovery point and response, "
      "the lock released";
  emit(j);
}

void cycle_resolvers_scenario(const Config& config) {
  const std::string name = "mysql.cycle_resolvers";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  const std::size_t per = config.ops(5'000, 1'500) / threads;
  const std::size_t total = per * threads;
  idem::Resolvers resolvers;
  resolvers.add("BENCH", [](const idem::Record&, const idem::ResolveContext&) {
    return idem::Resolution::not_happened();
  });
  idem::Options with_resolvers = options;
  with_resolvers.resolvers = &resolvers;
  std::atomic<long> lib_runs{0}, raw_runs{0};
  auto cycles = [&](int t, int r, const idem::Options& o) {
    long runs = 0;
    for (std::size_t i = 0; i < per; ++i) {
      auto out = idem::run_once(*server.store, idem::Key{"BENCH", mix_key_id(r, t, i)},
                                fixed_fingerprint(), PaidBusiness{&runs}, o);
      if (!out) throw std::runtime_error("neither acquired nor replayed");
    }
    return runs;
  };
  Side library{[&](int) { server.truncate(lib_table); },
               [&](int t, int r) { lib_runs += cycles(t, r, with_resolvers); }};
  Side baseline{[&](int) { server.truncate(lib_table); },
                [&](int t, int r) { raw_runs += cycles(t, r, options); }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, "report (about 1.0: no cost)");
  j["connections"] = threads;
  j["duplicates"] = 0.12;
  j["library_executions"] = lib_runs.load() / config.rounds_per_side();
  j["baseline_executions"] = raw_runs.load() / config.rounds_per_side();
  j["library"] = "mysql.mix's run_once with a resolver registered for the biz_type";
  j["baseline"] = "the same run_once without resolvers";
  emit(j);
}

}  // namespace bench::mysql_bench
