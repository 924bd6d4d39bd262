#pragma once
// idem: do it once. This header is the whole core; every header below also compiles alone.
//
// Start here, by job:
//   run_once.hpp       one call claims the key, runs the business once and records its result
//   guard.hpp          IdempotencyGuard: the same steps by hand (commit, fail, replay)
//   consume.hpp        message consumers: consume, consume_batch and the Ack they answer
//   consumer_policy.hpp   the consumers' retry delays and the attempts a key may have
//   partition_progress.hpp   the offset a Kafka-style consumer commits after a batch
//   batch.hpp          claim_batch: many keys at once
//   memory_store.hpp   MemoryStore, the in-process store (unit tests, single-process services)
//   cached_store.hpp   CachedStore: duplicates of finished keys answered from process memory
//   key.hpp, fingerprint.hpp, options.hpp            what every call takes
//   outcome.hpp, permanent_failure.hpp, errors.hpp   what comes back, and what is thrown
//   state_machine.hpp  guarded status transitions, which stop a duplicate state change
//   observer.hpp, metrics.hpp, janitor.hpp           running it: hooks, counters, housekeeping
//
// Not in here: the backends (idem/mysql.hpp, idem/sqlite.hpp, each of which includes this
// header) and HTTP (idem/http.hpp). For writing a store of your own: store.hpp (the contract),
// optional_operations.hpp (what a store may add to it), backend/ (namespace idem::backend: the
// decision table and every transition without I/O in backend/record_rules.hpp, the steps, the
// skeleton and pool of a server backend), same_transaction/ (the bound store of an SQL
// backend) and testing/conformance.hpp (the suite that checks a store);
// testing/memory_table.hpp is a business table in memory for unit tests of state machines.

// Running an action once
#include "idem/batch.hpp"
#include "idem/consume.hpp"
#include "idem/consumer_policy.hpp"
#include "idem/guard.hpp"
#include "idem/partition_progress.hpp"
#include "idem/run_once.hpp"

// What a call takes
#include "idem/clock.hpp"
#include "idem/fingerprint.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"

// What comes back, and what is thrown
#include "idem/errors.hpp"
#include "idem/outcome.hpp"
#include "idem/permanent_failure.hpp"
#include "idem/record.hpp"
#include "idem/serializable.hpp"
#include "idem/status.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

// Stores: the in-process one, the cache in front of any store, and the contract every store keeps
#include "idem/cached_store.hpp"
#include "idem/memory_store.hpp"
#include "idem/store.hpp"

// Guarded state changes
#include "idem/state_machine.hpp"

// Running it: hooks, counters, housekeeping
#include "idem/janitor.hpp"
#include "idem/metrics.hpp"
#include "idem/observer.hpp"
#include "idem/observers.hpp"
