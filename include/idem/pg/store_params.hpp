#pragma once
// idem::pg::StoreParams: the settings of an idem::pg::Store (idem/pg/store.hpp).

#include <string>

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
  // Check the table (check_schema) once, on the first operation of this store: a table not as
  // idem expects fails with SchemaMismatch before any claim. false: the caller checks it
  // (ensure_schema or check_schema at start-up).
  bool check_table = true;
};

}  // namespace idem::pg
