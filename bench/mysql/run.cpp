// run_mysql: every selected mysql.* scenario, in scenario_names() order.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "scenarios.hpp"

namespace bench {

using namespace mysql_bench;

int run_mysql(const Config& config, const Selected& selected) {
  const std::vector<std::pair<std::string, std::function<void()>>> scenarios = {
      {"mysql.claim", [&] { claim_scenario(config, false); }},
      {"mysql.claim_floor", [&] { claim_scenario(config, true); }},
      {"mysql.returning", [&] { returning_scenario(config, false); }},
      {"mysql.returning_dup", [&] { returning_scenario(config, true); }},
      {"mysql.cycle", [&] { cycle_scenario(config, false); }},
      {"mysql.cycle_floor", [&] { cycle_scenario(config, false, true); }},
      {"mysql.async_cycle", [&] { async_cycle_scenario(config); }},
      {"mysql.mix", [&] { cycle_scenario(config, true); }},
      {"mysql.tx", [&] { tx_scenario(config, TxMode::library); }},
      {"mysql.async_bound", [&] { async_bound_scenario(config); }},
      {"mysql.tx_floor", [&] { tx_scenario(config, TxMode::floor); }},
      {"mysql.tx_claim_first", [&] { tx_scenario(config, TxMode::claim_first); }},
      {"mysql.tx_own", [&] { tx_scenario(config, TxMode::own); }},
      {"mysql.tx_handwritten", [&] { tx_handwritten_scenario(config); }},
      {"mysql.steps", [&] { steps_scenario(config); }},
      {"mysql.cycle_resolvers", [&] { cycle_resolvers_scenario(config); }},
      {"mysql.cache", [&] { cache_scenario(config, false); }},
      {"mysql.cache_storm", [&] { cache_scenario(config, true); }},
      {"mysql.batch", [&] { batch_scenario(config); }},
      {"mysql.async_batch", [&] { async_batch_scenario(config); }},
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
