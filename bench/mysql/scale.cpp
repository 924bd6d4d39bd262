// mysql.batch, mysql.storm, mysql.big_table.
#include "shared.hpp"

namespace bench::mysql_bench {

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
    std::atomic<bool> failed{false};
    // One caller's request for one key: the library's run_once, or the raw INSERT whose winner
    // runs the business and UPDATEs while the losers read the row.
    auto call = [&](std::size_t k, const std::string& id) {
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
      } else if (cycles[k]->insert.execute(id)) {
        executed = true;
        std::this_thread::sleep_for(business);
        cycles[k]->complete.stmt[0].str = nlohmann::json{{"status", "paid"}}.dump();
        cycles[k]->complete.stmt[1].str = id;
        cycles[k]->complete.stmt.execute();
      } else {
        reads[k]->stmt[0].str = id;
        reads[k]->stmt.query();
      }
      if (executed) {
        ++executions;
      } else {
        lat[k].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    };
    res.seconds = run_parallel(callers, [&](int t) {
      const auto k = static_cast<std::size_t>(t);
      try {
        if (!lib) {
          cycles[k] = std::make_unique<RawCycle>(server.conn(t));
          reads[k] = std::make_unique<RawKeyed>(server.conn(t), raw_select_sql(raw_table),
                                                std::vector<Kind>{});
          reads[k]->stmt[1].str = "BENCH";
        }
        for (int key = 0; key < key_count; ++key) {
          sync.arrive_and_wait();
          // A caller that failed has left the barrier (below); the others follow it out at
          // the next key, and run_parallel rethrows its error.
          if (failed.load()) break;
          call(k, fmt::format("storm-r{}-{}", r, key));
        }
      } catch (...) {
        failed = true;
        sync.arrive_and_drop();
        throw;
      }
      if (failed.load()) sync.arrive_and_drop();
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

}  // namespace bench::mysql_bench
