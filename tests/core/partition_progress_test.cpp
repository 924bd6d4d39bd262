// Where a partition's consumer stands after a batch (idem/partition_progress.hpp).
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include <idem/partition_progress.hpp>

namespace {

idem::Ack progress_ack(idem::Ack::Action action, int delay_ms = 0) {
  return {action, idem::Verdict::acquired, "", std::chrono::milliseconds{delay_ms}};
}

}  // namespace

TEST_CASE("partition_progress: the offset moves past done messages up to the first retry") {
  using idem::Ack;
  const std::vector<Ack> all_done = {progress_ack(Ack::commit), progress_ack(Ack::dead_letter),
                                     progress_ack(Ack::commit)};
  CHECK(idem::partition_progress(all_done).settled == 3);
  CHECK(idem::partition_progress(all_done).wait == idem::Duration::zero());

  const std::vector<Ack> held = {progress_ack(Ack::commit), progress_ack(Ack::retry_later, 250),
                                 progress_ack(Ack::commit), progress_ack(Ack::retry_later, 900)};
  const idem::PartitionProgress p = idem::partition_progress(held);
  CHECK(p.settled == 1);  // the commit after the retry is polled again and replays
  CHECK(p.wait == std::chrono::milliseconds{250});

  CHECK(idem::partition_progress(std::vector<Ack>{}).settled == 0);
  CHECK(idem::partition_progress(std::vector<Ack>{progress_ack(Ack::retry_later, 5)}).settled == 0);
}
