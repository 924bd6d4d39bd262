#pragma once
// idem::pg::StoreParams: the settings of an idem::pg::Store (idem/pg/store.hpp).

#include <string>

#include "idem/bound_claim.hpp"
#include "idem/retry_policy.hpp"

namespace idem::pg {

struct StoreParams {
  // The record table; 1-52 characters of [A-Za-z0-9_$], optionally schema.table (unqualified:
  // the first schema of the connection's search_path).
  std::string table = "idempotent_record";
  // Tries per operation on transient failures (serialization failure, deadlock, lock
  // timeout, lost connection, a server starting or failing over), and the jittered backoff
  // between them.
  RetryPolicy retry{};
  // How a store bound to the caller's transaction (Store::bind) claims: record_last (read,
  // run the body, INSERT the finished record; a concurrent duplicate runs speculatively, waits
  // on the first's row at its INSERT, and is rolled back and run again) or claim_first (INSERT
  // a processing row at once, UPDATE it; a duplicate waits on that row at its claim).
  // docs/postgres.md, "Same-transaction mode", says when to choose which.
  BoundClaim bound_claim = BoundClaim::record_last;
  // Check the table (check_schema) once, on the first operation of this store: a table not as
  // idem expects fails with SchemaMismatch before any claim. false: the caller checks it
  // (ensure_schema or check_schema at start-up).
  bool check_table = true;
};

}  // namespace idem::pg
