#pragma once
// idem::redis::Store: idempotency records in Redis, one key per record (docs/redis.md).
//
// Every write is one Lua script, atomic on the server, with `now` from the server's clock
// (detail/record_scripts.hpp). A claim is one round trip: the script writes a fresh claim, or
// answers with the record that is there, and decide() (idem/backend/record_rules.hpp) takes
// the verdict; a takeover is a second script, guarded by the fence and owner token it read.
// A repair and a step's recovery point are read, computed in C++ (repaired(), with_step())
// and written by a script guarded by what was read, like a takeover. complete() and fail()
// are fenced by fence and owner token; a write whose reply was lost with its connection is
// reconciled by reading the record (the owner token says whether it was ours), as on MySQL
// (idem/backend/store_skeleton.hpp).
//
// Expiry: a record also expires in Redis itself (its key's time to live),
// StoreParams::keep_expired after its expire_at. Until then it is an expired record as on any store (a claim takes it over
// with the next fence, find() shows it, purge_expired() deletes it); after that Redis has
// deleted it, and the key starts afresh at fence 1. An outcome_unknown record has no time to
// live at all until a repair settles it.
//
// list() reads stale claims and outcome_unknown records from per-bucket indexes kept in the
// order it answers in; any other query walks every record (docs/redis.md, "Listing").

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/backend/record_rules.hpp"
#include "idem/backend/store_skeleton.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/optional_operations.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/record_stats.hpp"
#include "idem/redis/connection.hpp"
#include "idem/redis/detail/layout.hpp"
#include "idem/redis/detail/record_ops.hpp"
#include "idem/redis/detail/record_scripts.hpp"
#include "idem/redis/errors.hpp"
#include "idem/redis/pool.hpp"
#include "idem/redis/reply.hpp"
#include "idem/redis/store_params.hpp"
#include "idem/retry_policy.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/table_layout.hpp"
#include "idem/ticket.hpp"

namespace idem::redis {

// What ensure_schema() did.
struct Migration {
  TableLayout layout;               // the records' layout after it
  std::size_t stamped_buckets = 0;  // the buckets it stamped (0: all were stamped already)
};

class Store : public backend::StoreSkeleton<detail::Backend> {
 public:
  // The store shares the pool (other stores may use it too).
  explicit Store(std::shared_ptr<Pool> pool, StoreParams params = {})
      : StoreSkeleton(checked_ops(params), params.retry), pool_(std::move(pool)) {
    if (!pool_) throw InvalidArgument("idem::redis::Store: pool must not be null");
    attach(pool_.get());
    if (params.check_layout) {
      check_table_first([this](Connection& c) { ops().layout_of(c); });
    }
  }

  using StoreSkeleton::pool;

  // Stamps every bucket of the prefix with this idem's layout, so that records are written
  // packed from then on (detail/layout.hpp, "Layouts"; docs/redis.md, "Layouts and
  // upgrades"). Run it (or `idem schema migrate`) once every process that shares the prefix
  // runs an idem of layout 2 or later: an older one cannot read a packed record. Safe to run
  // twice and while others claim.
  Migration ensure_schema() {
    const Migration done = with_retries_unchecked("ensure_schema", [&](Connection& c, bool) {
      const std::size_t stamped = ops().stamp_layout(c);
      return Migration{.layout = ops().layout_of(c), .stamped_buckets = stamped};
    });
    table_checked();
    return done;
  }

  // The records' layout from the buckets' stamps, changing nothing; throws SchemaMismatch when a
  // newer idem stamped a layout this one cannot write.
  TableLayout check_schema() {
    const TableLayout layout = with_retries_unchecked(
        "check_schema", [&](Connection& c, bool) { return ops().layout_of(c); });
    table_checked();
    return layout;
  }

 private:
  static detail::RecordOps checked_ops(const StoreParams& p) {
    detail::validate(p);
    return detail::RecordOps(detail::Layout(p.prefix, p.buckets), p.keep_expired);
  }

  std::shared_ptr<Pool> pool_;
};

static_assert(idem::Store<Store>);
static_assert(RepairingStore<Store> && ListingStore<Store> && RecoveryPointStore<Store> &&
              StatsStore<Store> && BatchClaimingStore<Store>);

}  // namespace idem::redis
