#pragma once
// The mysql.* scenarios of idem-bench: idem::mysql against the bare C API on the same server,
// same table shape (idem::mysql::record_table_ddl), same rows. One file per family: claim.cpp
// (claim, returning), cycle.cpp (cycle, mix), tx.cpp (same-transaction), scale.cpp (batch,
// storm, big_table).
#include "../common.hpp"
#include "../scenarios.hpp"

namespace bench::mysql_bench {

void claim_scenario(const Config& config, bool floor);
void returning_scenario(const Config& config, bool duplicates);
void cycle_scenario(const Config& config, bool mix, bool floor = false);

// mysql.tx: the library's same-transaction mode. mysql.tx_floor: the library's own five
// statements (its SQL text, from idem::mysql::detail::make_record_sql) sent through the bare
// C API: the best any claim-first implementation can do on this server, so tx / tx_floor is
// what the library itself costs. mysql.tx_record_last: the record-last sketch. mysql.tx_own:
// mysql.tx on the caller's own handles (with_transaction on a lender, a borrowed MYSQL*, whose
// statements travel as text instead of as cached prepared statements).
enum class TxMode { library, floor, record_last, own };
void tx_scenario(const Config& config, TxMode mode);

void batch_scenario(const Config& config);
void storm_scenario(const Config& config);
void big_table_scenario(const Config& config);

}  // namespace bench::mysql_bench
