#pragma once
// idem::redis::StoreParams: the settings of an idem::redis::Store (idem/redis/store.hpp).

#include <chrono>
#include <cstdint>
#include <string>

#include "idem/retry_policy.hpp"

namespace idem::redis {

struct StoreParams {
  // The first part of every key of the store (1-64 bytes of [A-Za-z0-9_.:-]). Stores with
  // different prefixes share a server without seeing each other's records.
  std::string prefix = "idem";
  // Buckets the records are spread over (1-16384); each bucket lies in one cluster slot.
  // Part of the layout: every process that shares the prefix must use the same count.
  std::uint32_t buckets = 1024;
  // How long Redis keeps a record past its expire_at before deleting it by itself (at least
  // 1 s). purge_expired() deletes expired records sooner; without a janitor this is when
  // they go.
  std::chrono::milliseconds keep_expired{std::chrono::hours{1}};
  // Tries per operation on transient failures (a lost connection, a server loading its data,
  // a failover), and the jittered backoff between them.
  RetryPolicy retry{};
  // Check the records' layout (check_schema) once, on the first operation of this store: a
  // prefix that a newer idem stamped with a layout this one cannot write fails with
  // SchemaMismatch before any claim. false: the caller checks it at start-up.
  bool check_layout = true;
};

}  // namespace idem::redis
