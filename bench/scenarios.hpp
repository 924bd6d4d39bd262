#pragma once
// The scenario groups of idem-bench. Each run_* emits one JSON line per scenario it runs and
// returns how many selected scenarios could not run (no server, a failed statement; reported
// on stderr): a benchmark that did not run has no figures to report.

#include <functional>
#include <string>

#include "common.hpp"

namespace bench {

// Whether a scenario was selected (by --only, or all by default).
using Selected = std::function<bool(const std::string& scenario)>;

int run_memory(const Config& config, const Selected& selected);
int run_mysql(const Config& config, const Selected& selected);
int run_sqlite(const Config& config, const Selected& selected);
int run_galera(const Config& config, const Selected& selected);
int run_redis(const Config& config, const Selected& selected);
int run_redis_async(const Config& config, const Selected& selected);
int run_footprint(const Config& config, const Selected& selected);
int run_amqp(const Config& config, const Selected& selected);
int run_pg(const Config& config, const Selected& selected);

// Every scenario name, in the order they run.
inline const std::vector<std::string>& scenario_names() {
  static const std::vector<std::string> names = {"memory.cycle",
                                                 "mysql.claim",
                                                 "mysql.claim_floor",
                                                 "mysql.returning",
                                                 "mysql.returning_dup",
                                                 "mysql.cycle",
                                                 "mysql.cycle_floor",
                                                 "mysql.async_cycle",
                                                 "mysql.mix",
                                                 "mysql.tx",
                                                 "mysql.async_bound",
                                                 "mysql.tx_floor",
                                                 "mysql.tx_claim_first",
                                                 "mysql.tx_own",
                                                 "mysql.tx_handwritten",
                                                 "mysql.steps",
                                                 "mysql.cycle_resolvers",
                                                 "mysql.cache",
                                                 "mysql.cache_storm",
                                                 "mysql.batch",
                                                 "mysql.async_batch",
                                                 "mysql.storm",
                                                 "mysql.big_table",
                                                 "sqlite.cycle",
                                                 "sqlite.async_cycle",
                                                 "redis.claim",
                                                 "redis.cycle",
                                                 "redis.mix",
                                                 "redis.cycle_setnx",
                                                 "redis.batch",
                                                 "redis.async_cycle",
                                                 "redis.async_cycle_setnx",
                                                 "galera.cycle",
                                                 "redis.footprint",
                                                 "mysql.footprint",
                                                 "amqp.consume",
                                                 "pg.claim",
                                                 "pg.claim_shape",
                                                 "pg.cycle",
                                                 "pg.mix",
                                                 "pg.mix_handwritten",
                                                 "pg.tx",
                                                 "pg.tx_handwritten",
                                                 "pg.async_cycle"};
  return names;
}

}  // namespace bench
