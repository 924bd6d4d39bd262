#pragma once
// idem::JanitorParams and idem::JanitorStats: how a Janitor works and what it counted, for the
// blocking one (idem/janitor.hpp) and the coroutine one (idem/async/janitor.hpp) alike.

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "idem/metrics.hpp"
#include "idem/resolver.hpp"

namespace idem {

struct JanitorParams {
  std::chrono::milliseconds interval{std::chrono::seconds{60}};
  std::size_t purge_batch = 1000;       // rows per DELETE
  std::size_t purge_max_batches = 100;  // DELETEs per round
  // Pause between two DELETEs of a round, so that a backlog purge leaves the server to the
  // claims running alongside (measured: claim p99 2.6x slower during an unpaced purge of
  // 100,000 rows, 1.1x with 250 ms; docs/performance.md). Zero purges as fast as it can.
  std::chrono::milliseconds purge_pause{250};
  std::size_t release_batch = 1000;  // stale claims released per round
  // Not owned; must outlive the Janitor. Null: stale claims are released blindly.
  const Resolvers* resolvers = nullptr;
  // Records of each biz_type with a resolver asked about per round (stale, then unknown).
  std::size_t resolve_batch = 100;
  // An outcome_unknown record is asked about again once it was not updated for this long.
  std::chrono::milliseconds unknown_retry{std::chrono::minutes{5}};
  // Not owned; must outlive the Janitor. Each round's work and failures are counted there
  // (idem_janitor_*: rounds, purged, released, resolved by answer, errors by task and kind, the
  // time of the last round), with the gauge idem_stale_claims for a store that can list and,
  // with resolvers, idem_outcome_unknown_records per biz_type. Null: no metrics.
  Metrics* metrics = nullptr;
};

struct JanitorStats {
  std::uint64_t rounds = 0;
  std::uint64_t purged = 0;
  std::uint64_t released = 0;  // blindly or, with resolvers, by a fenced repair
  std::uint64_t errors = 0;
  std::uint64_t retryable_errors = 0;  // of errors: a StoreError that was retryable
  // With resolvers: the answers that repaired a record, by kind.
  std::uint64_t resolved_happened = 0;
  std::uint64_t resolved_not_happened = 0;
  std::uint64_t resolved_unknown = 0;
  // Records found in outcome_unknown by the last round (at most resolve_batch per biz_type): a
  // gauge to alert on; each needs a resolver's answer or an operator's repair.
  std::uint64_t outcome_unknown = 0;
  // Claims whose lease ran out as the last round found them (a store that can list, with
  // metrics or resolvers; at most a batch).
  std::uint64_t stale_claims = 0;
  // Rounds whose purge stopped at purge_max_batches with expired records left: when most
  // rounds do, the purge is falling behind.
  std::uint64_t purge_unfinished = 0;
};

}  // namespace idem
