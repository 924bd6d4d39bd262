#pragma once
// idem::BoundClaim: how a store bound to the caller's transaction claims a key.

namespace idem {

// How a bound store claims inside the caller's transaction (docs/mysql.md, "Same-transaction
// mode", compares the two).
enum class BoundClaim {
  // INSERT the processing row first, UPDATE it with the result. A concurrent duplicate waits
  // on the row's lock, then replays.
  claim_first,
  // Read first, without a lock: replay when a record is there; otherwise run the business and
  // INSERT the finished record last. A concurrent duplicate runs its body too; its INSERT
  // meets the first one's row, and its transaction rolls back and runs again, replaying.
  record_last,
};

}  // namespace idem
