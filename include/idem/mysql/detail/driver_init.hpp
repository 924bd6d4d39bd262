#pragma once
// The client library's process-wide and per-thread setup, each done once.

#include <mysql.h>

#include <mutex>

#include "idem/errors.hpp"

namespace idem::mysql::detail {

// mysql_library_init is not thread-safe: the first connection of the process runs it, once.
inline void library_init() {
  static std::once_flag once;
  static int rc = 0;
  std::call_once(once, [] { rc = mysql_library_init(0, nullptr, nullptr); });
  if (rc != 0) throw StoreError("idem::mysql: mysql_library_init failed", false);
}

// Per-thread driver state: set up before the thread's first connection, freed at thread exit.
inline void thread_init() {
  struct ThreadState {
    ThreadState() { mysql_thread_init(); }
    ~ThreadState() { mysql_thread_end(); }
  };
  thread_local ThreadState state;
  (void)state;
}

}  // namespace idem::mysql::detail
