// mysql.cache, mysql.cache_storm: idem::CachedStore in front of the MySQL store against the
// plain store, both through run_once, in the same run.
#include "shared.hpp"

namespace bench::mysql_bench {

void cache_scenario(const Config& config, bool storm) {
  const std::string name = storm ? "mysql.cache_storm" : "mysql.cache";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  idem::CachedStore<idem::mysql::Store> cached(*server.store, {.max_entries = 100'000});
  const std::size_t per = config.ops(5'000, 1'500) / threads;
  const std::size_t total = per * threads;
  // mysql.cache: 12% duplicates (mix_key_id). mysql.cache_storm: every other request repeats
  // the one before it, a client retrying as soon as its answer was late.
  auto id_of = [&](int r, int t, std::size_t i) {
    return storm ? key_id(r, t, i - i % 2) : mix_key_id(r, t, i);
  };
  std::atomic<long> lib_runs{0}, raw_runs{0};
  auto side = [&](auto& store, std::atomic<long>& executions) {
    return [&](int t, int r) {
      long runs = 0;
      for (std::size_t i = 0; i < per; ++i) {
        auto out = idem::run_once(
            store, idem::Key{"BENCH", id_of(r, t, i)}, fixed_fingerprint(),
            [&] {
              ++runs;
              return nlohmann::json{{"status", "paid"}};
            },
            options);
        if (!out) throw std::runtime_error("neither acquired nor replayed");
      }
      executions += runs;
    };
  };
  Side library{[&](int) {
                 server.truncate(lib_table);
                 cached.clear();
               },
               side(cached, lib_runs)};
  Side baseline{[&](int) { server.truncate(lib_table); }, side(*server.store, raw_runs)};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, "report");
  j["connections"] = threads;
  j["duplicates"] = storm ? 0.5 : 0.12;
  j["library_executions"] = lib_runs.load() / config.rounds_per_side();
  j["baseline_executions"] = raw_runs.load() / config.rounds_per_side();
  const auto stats = cached.stats();
  j["library_cache_hits_last_round"] = stats.hits;
  j["library"] =
      "run_once on idem::CachedStore in front of mysql::Store: a duplicate of a key "
      "this process finished is answered from memory";
  j["baseline"] = "run_once on the plain mysql::Store: a duplicate claims and reads the record";
  emit(j);
}

}  // namespace bench::mysql_bench
