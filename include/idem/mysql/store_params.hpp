#pragma once
// idem::mysql::StoreParams: the settings of an idem::mysql::Store (idem/mysql/store.hpp).

#include <string>

#include "idem/bound_claim.hpp"
#include "idem/retry_policy.hpp"

namespace idem::mysql {

struct StoreParams {
  // The record table; 1-64 characters of [A-Za-z0-9_$], optionally schema.table.
  std::string table = "idempotent_record";
  // Tries per operation on transient failures (deadlock, lock wait timeout, lost
  // connection), and the jittered backoff between them.
  RetryPolicy retry{};
  // Claim with INSERT IGNORE ... RETURNING where the server has it (MariaDB 10.5 and later,
  // seen per connection), saving the read-back of a fresh claim; false always reads back
  // (for a proxy that cannot pass RETURNING through). Batch claims on a Galera node always
  // read back (see Connection::in_galera_cluster).
  bool insert_returning = true;
  // How store.bind(...) claims inside the caller's transaction: record_last (read, run, INSERT
  // the finished record; a concurrent duplicate runs speculatively and is rolled back and run
  // again) or claim_first (INSERT a processing row, UPDATE it; a duplicate waits on its lock).
  // docs/mysql.md, "Same-transaction mode", says when to choose which.
  BoundClaim bound_claim = BoundClaim::record_last;
  // Check the table (check_schema) once, on the first operation of this store: a table not as
  // idem expects fails with SchemaMismatch before any claim. false: the caller checks it
  // (ensure_schema or check_schema at start-up), or the store runs beside an older idem during
  // an upgrade. Stores bound to a caller's connection (bind) do not check by themselves.
  bool check_table = true;
};

}  // namespace idem::mysql
