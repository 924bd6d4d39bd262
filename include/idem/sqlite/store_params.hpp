#pragma once
// idem::sqlite::StoreParams: the settings of an idem::sqlite::Store (idem/sqlite/store.hpp).

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "idem/clock.hpp"
#include "idem/retry_policy.hpp"
#include "idem/sqlite/connection_params.hpp"

namespace idem::sqlite {

struct StoreParams {
  // The record table; 1-64 characters of [A-Za-z0-9_$], optionally schema.table.
  std::string table = "idempotent_record";
  // Where `now` comes from. Inject a ManualClock to move time in tests. Processes sharing a
  // file must share the clock, i.e. run on one host.
  std::function<TimePoint()> clock = system_now;
  // How long a statement waits for another connection's lock (and a call for a free pooled
  // connection) before it fails with SQLITE_BUSY.
  std::chrono::milliseconds busy_timeout{5'000};
  // full: every commit is synced to disk (the default; a payment claim must survive a power
  // cut). normal: faster, but a power cut may lose the last commits.
  Synchronous synchronous = Synchronous::full;
  // Connections to the file at most (one per thread using the store at that moment).
  std::size_t pool_size = 8;
  // Tries per operation while the file stays locked (SQLITE_BUSY / SQLITE_LOCKED after the
  // busy timeout), and the jittered backoff between them; the last failure is thrown as a
  // retryable StoreError.
  RetryPolicy retry{.max_attempts = 4};
  // Create (or migrate) the table and its indexes when the store is constructed, and check the
  // result (ensure_schema).
  bool create_schema = true;
  // With create_schema false: check the table (check_schema) once, on the store's first
  // operation, so that a table not as idem expects fails with SchemaMismatch before any claim.
  // false: the caller checks it. Stores bound to a caller's connection do not check by
  // themselves.
  bool check_table = true;
};

}  // namespace idem::sqlite
