#pragma once
// The mysql.* scenarios of idem-bench: idem::mysql against the bare C API on the same server,
// same table shape (idem::mysql::record_table_ddl), same rows. One file per family: claim.cpp
// (claim, returning), cycle.cpp (cycle, mix), async.cpp (the coroutine stores against the
// blocking ones), tx.cpp (same-transaction), cache.cpp (CachedStore), scale.cpp (batch,
// storm, big_table).
#include "../common.hpp"
#include "../scenarios.hpp"

namespace bench::mysql_bench {

void claim_scenario(const Config& config, bool floor);
void returning_scenario(const Config& config, bool duplicates);
void cycle_scenario(const Config& config, bool mix, bool floor = false);
// mysql.async_cycle (issue 18): mysql.cycle's request on idem::mysql::AsyncStore from one loop
// thread, many requests in flight, against mysql.cycle's library side (the blocking store on
// --threads threads) in the same run.
void async_cycle_scenario(const Config& config);
// mysql.async_bound (issue 31): mysql.tx's request (the claim in the business's transaction)
// through the coroutine with_transaction and AsyncStore's bound store from one loop thread,
// against mysql.tx's library side on --threads threads.
void async_bound_scenario(const Config& config);
// mysql.async_batch (issue 31): mysql.batch in coroutines, idem::async::claim_batch against one
// claim per message, both from one loop thread.
void async_batch_scenario(const Config& config);

// mysql.tx: the library's same-transaction mode (its default, BoundClaim::record_last).
// mysql.tx_claim_first: the same with BoundClaim::claim_first. mysql.tx_floor: record_last's
// three statements (its SQL text, from idem::mysql::detail::make_record_sql) sent through the
// bare C API on a session with autocommit off: the best that shape can do on this server.
// mysql.tx_own: mysql.tx on the caller's own handles (with_transaction on a lender, a borrowed
// MYSQL*, whose statements travel as text instead of as cached prepared statements).
enum class TxMode { library, claim_first, floor, own };
void tx_scenario(const Config& config, TxMode mode);
// mysql.tx_handwritten: the dedup a service writes by hand (a narrow dedup row INSERTed first,
// replay on ER_DUP_ENTRY, the business, an UPDATE storing the response, COMMIT) through the
// bare C API, against the library's default bound mode doing the same business, at 12%
// duplicates.
void tx_handwritten_scenario(const Config& config);

// mysql.steps (issue 26): three steps with recovery points (two local, in transactions with
// their recovery points, one remote) against the same steps hand-written Stripe-style.
// mysql.cycle_resolvers: mysql.mix with a resolver registered against without: the
// resolver's cost on the claim path when no record is stale.
void steps_scenario(const Config& config);
void cycle_resolvers_scenario(const Config& config);

// mysql.cache (12% duplicates) and mysql.cache_storm (50%): run_once on idem::CachedStore in
// front of the MySQL store against the plain store.
void cache_scenario(const Config& config, bool storm);

void batch_scenario(const Config& config);
void storm_scenario(const Config& config);
void big_table_scenario(const Config& config);

}  // namespace bench::mysql_bench
