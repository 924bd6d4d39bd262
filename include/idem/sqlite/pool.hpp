#pragma once
// idem::sqlite::Pool: a bounded, thread-safe pool of connections to one database file, handed
// out as RAII handles.
//
// - At most `size` connections exist; acquire() waits up to the busy timeout for one.
// - Connections are opened lazily, each in WAL mode with the busy timeout and synchronous
//   level of ConnectionParams, and keep their prepared statements while pooled.
// - A handle returned inside an open transaction is rolled back first; a broken connection
//   (corrupt file, I/O error) is closed instead of pooled.
// - Owned by one process: never use a pool (or any connection) that was open before fork()
//   in the child; open a new one there.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/sqlite/connection.hpp"

namespace idem::sqlite {

class Pool {
 public:
  class Handle {
   public:
    Handle(Handle&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)), conn_(std::move(other.conn_)) {}
    Handle& operator=(Handle&&) = delete;
    Handle(const Handle&) = delete;
    ~Handle() {
      if (pool_ != nullptr) pool_->release(std::move(conn_));
    }
    Connection& operator*() const noexcept { return *conn_; }
    Connection* operator->() const noexcept { return conn_.get(); }

   private:
    friend class Pool;
    Handle(Pool* pool, std::unique_ptr<Connection> conn) : pool_(pool), conn_(std::move(conn)) {}
    Pool* pool_;
    std::unique_ptr<Connection> conn_;
  };

  explicit Pool(std::filesystem::path path, ConnectionParams params = {}, std::size_t size = 8)
      : path_(std::move(path)), params_(params), size_(size) {
    if (size_ == 0) throw InvalidArgument("idem::sqlite::Pool: size must be at least 1");
    if (params_.busy_timeout < std::chrono::milliseconds::zero()) {
      throw InvalidArgument("idem::sqlite::Pool: busy_timeout must not be negative");
    }
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A connection for this thread's exclusive use. Throws StoreError: retryable when none frees
  // up within the busy timeout, not retryable when the file cannot be opened.
  Handle acquire() {
    {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, params_.busy_timeout,
                        [&] { return !idle_.empty() || open_ < size_; })) {
        throw StoreError(
            fmt::format("idem::sqlite::Pool: no connection to {} free within {} ms (size {})",
                        path_.string(), params_.busy_timeout.count(), size_),
            true);
      }
      if (!idle_.empty()) {
        std::unique_ptr<Connection> conn = std::move(idle_.back());
        idle_.pop_back();
        return Handle(this, std::move(conn));
      }
      ++open_;  // reserve the slot; the connection is opened below, outside the lock
    }
    try {
      return Handle(this, std::make_unique<Connection>(path_, params_));
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        --open_;
      }
      cv_.notify_one();
      throw;
    }
  }

  const std::filesystem::path& path() const noexcept { return path_; }
  const ConnectionParams& params() const noexcept { return params_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void release(std::unique_ptr<Connection> conn) noexcept {
    if (conn && !conn->broken() && conn->in_transaction()) {
      // Someone gave the handle back mid-transaction; the next user must not run in it.
      try {
        conn->exec("ROLLBACK");
      } catch (...) {
      }
      if (conn->in_transaction()) conn.reset();
    }
    if (conn && conn->broken()) conn.reset();
    {
      std::lock_guard lock(mutex_);
      if (conn) {
        idle_.push_back(std::move(conn));
      } else {
        --open_;
      }
    }
    cv_.notify_one();
  }

  std::filesystem::path path_;
  ConnectionParams params_;
  std::size_t size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::size_t open_ = 0;  // connections that exist: idle or handed out
};

}  // namespace idem::sqlite
