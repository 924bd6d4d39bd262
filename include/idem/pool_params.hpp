#pragma once
// idem::PoolParams: the size and timing of a backend's pool of connections.

#include <chrono>
#include <cstddef>

namespace idem {

// The size and timing of a server backend's pool (idem::mysql::Pool, idem::redis::Pool).
struct PoolParams {
  std::size_t size = 8;
  // How long acquire() waits for a free connection before it throws.
  std::chrono::milliseconds acquire_timeout{10'000};
  // A connection idle longer than this is pinged before it is handed out.
  std::chrono::milliseconds ping_after_idle{5'000};
};

}  // namespace idem
