#pragma once
// idem::sqlite::ConnectionParams: how a connection idem opens waits for locks and syncs.

#include <chrono>

namespace idem::sqlite {

// PRAGMA synchronous in WAL mode.
enum class Synchronous {
  // The WAL is synced only at checkpoints: an application crash loses nothing, but a power
  // failure or an OS crash may lose the last commits (a claim, a recorded result).
  normal,
  // Every commit is synced before it returns: a recorded claim or result survives power loss.
  full,
};

struct ConnectionParams {
  // How long a statement waits for a lock held by another connection (thread or process)
  // before it fails with SQLITE_BUSY. A Store's pool also waits this long for a free connection.
  std::chrono::milliseconds busy_timeout{5'000};
  Synchronous synchronous = Synchronous::full;
};

}  // namespace idem::sqlite
