// mysql.claim, mysql.claim_floor, mysql.returning, mysql.returning_dup.
#include "shared.hpp"

namespace bench::mysql_bench {

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

}  // namespace bench::mysql_bench
