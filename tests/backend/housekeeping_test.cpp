// idem/backend/housekeeping.hpp: the batching rule that every store's purge_expired and
// release_stale, and the Janitor's paced purge, follow.
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include <idem/backend/housekeeping.hpp>

namespace {

// Runs the rule against statements that touch `rows` in turn (then 0): the batch sizes sent.
std::vector<std::size_t> housekeeping_run(idem::backend::HousekeepingBatches& b,
                                          const std::vector<std::size_t>& rows) {
  std::vector<std::size_t> sent;
  for (std::size_t i = 0; b.more(); ++i) {
    sent.push_back(b.batch());
    b.done(i < rows.size() ? rows[i] : 0);
  }
  return sent;
}

}  // namespace

TEST_CASE("HousekeepingBatches: stops at the first statement that is not full") {
  idem::backend::HousekeepingBatches b(100, 10);
  CHECK_FALSE(b.started());
  CHECK(housekeeping_run(b, {100, 100, 40, 100}) == std::vector<std::size_t>{100, 100, 100});
  CHECK(b.total() == 240);
  CHECK(b.started());
  CHECK_FALSE(b.unfinished());
}

TEST_CASE(
    "HousekeepingBatches: at most max_batches statements - then unfinished when all were full") {
  idem::backend::HousekeepingBatches b(50, 3);
  CHECK(housekeeping_run(b, {50, 50, 50, 50}).size() == 3);
  CHECK(b.total() == 150);
  CHECK(b.unfinished());

  idem::backend::HousekeepingBatches last_short(50, 3);
  CHECK(housekeeping_run(last_short, {50, 50, 49}).size() == 3);
  CHECK_FALSE(last_short.unfinished());
}

TEST_CASE("HousekeepingBatches: a batch or a budget of 0 runs no statement") {
  idem::backend::HousekeepingBatches no_rows(0, 10);
  CHECK(housekeeping_run(no_rows, {5}).empty());
  CHECK(no_rows.total() == 0);
  CHECK_FALSE(no_rows.unfinished());
  idem::backend::HousekeepingBatches no_batches(10, 0);
  CHECK(housekeeping_run(no_batches, {5}).empty());
  CHECK_FALSE(no_batches.unfinished());
}

TEST_CASE("HousekeepingBatches: release_stale is one batch") {
  idem::backend::HousekeepingBatches release(20, 1);
  CHECK(housekeeping_run(release, {20, 20}) == std::vector<std::size_t>{20});
  CHECK(release.total() == 20);
}
