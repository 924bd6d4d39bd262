#pragma once
// The batching rule of a store's housekeeping (purge_expired, release_stale), without I/O:
// every store, blocking or coroutine, standalone or bound, and the Janitor's paced purge run
// their statements as it says.

#include <cstddef>

namespace idem::backend {

// Housekeeping in batches, for every store and the Janitor's paced purge: statements of up to
// `batch` rows each (a DELETE of expired records, an UPDATE releasing stale claims), at most
// `max_batches` of them, until one touches fewer than `batch`. A batch of 0 runs none.
// release_stale is one batch: HousekeepingBatches(batch, 1).
class HousekeepingBatches {
 public:
  HousekeepingBatches(std::size_t batch, std::size_t max_batches) noexcept
      : batch_(batch), max_batches_(max_batches) {}

  // Whether another statement is due.
  bool more() const noexcept { return batch_ > 0 && done_ < max_batches_ && !drained_; }
  std::size_t batch() const noexcept { return batch_; }
  // Whether a statement has run (the Janitor pauses between two).
  bool started() const noexcept { return done_ > 0; }
  // The rows the last statement touched.
  void done(std::size_t rows) noexcept {
    total_ += rows;
    ++done_;
    drained_ = rows < batch_;
  }
  std::size_t total() const noexcept { return total_; }
  // Stopped at max_batches with every statement full: rows may be left for the next round.
  bool unfinished() const noexcept { return started() && done_ == max_batches_ && !drained_; }

 private:
  std::size_t batch_;
  std::size_t max_batches_;
  std::size_t done_ = 0;
  std::size_t total_ = 0;
  bool drained_ = false;
};

}  // namespace idem::backend
