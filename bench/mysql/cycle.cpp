// mysql.cycle, mysql.cycle_floor, mysql.mix.
#include "shared.hpp"

namespace bench::mysql_bench {

void cycle_scenario(const Config& config, bool mix, bool floor) {
  const std::string name = floor ? "mysql.cycle_floor" : mix ? "mysql.mix" : "mysql.cycle";
  const int threads = config.threads > 0 ? config.threads : 32;
  Server server(config, threads);
  const std::size_t per = config.ops(5'000, 1'500) / threads;
  const std::size_t total = per * threads;
  auto cycles = per_thread<RawCycle>(threads);
  auto floors = per_thread<FloorStatements>(threads);
  const auto sql = idem::mysql::detail::make_record_sql(lib_table);
  const bool has_returning = server.pool->acquire()->supports_returning();
  // mysql.mix: 12% duplicates (mix_key_id).
  auto id_of = [&](int r, int t, std::size_t i) {
    return mix ? mix_key_id(r, t, i) : key_id(r, t, i);
  };
  std::atomic<long> lib_runs{0}, raw_runs{0};

  Side library{[&](int) { server.truncate(lib_table); },
               [&](int t, int r) {
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
                 lib_runs += blocking_cycles(*server.store, per,
                                             [&](std::size_t i) { return id_of(r, t, i); });
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

}  // namespace bench::mysql_bench
