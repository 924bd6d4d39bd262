#pragma once
// idem::partition_progress: where a Kafka-style consumer stands after consume_batch answered a
// batch polled from one partition, whose offsets are committed in order.
//
//   std::vector<idem::Ack> acks = idem::consume_batch(store, requests, apply, options);
//   const idem::PartitionProgress p = idem::partition_progress(acks);
//   for (std::size_t i = 0; i < p.settled; ++i)
//     if (acks[i] == idem::Ack::dead_letter) dead_letter_topic.send(batch[i], acks[i].reason);
//   consumer.commit(partition, batch.front().offset + p.settled);  // the next offset to read
//   if (p.settled < acks.size()) {  // the rest comes again, from the first to retry
//     consumer.seek(partition, batch.front().offset + p.settled);
//     consumer.pause(partition, p.wait);
//   }
//
// The offset may only move past a message that is done: committed, or dead-lettered (sent to
// the dead-letter topic first). The first retry_later holds it, and the messages after it
// are polled again; those that were done already replay from their records (commit), so
// nothing runs twice.

#include <cstddef>
#include <span>

#include "idem/clock.hpp"
#include "idem/consume.hpp"

namespace idem {

struct PartitionProgress {
  // Messages from the front of the batch that are done (commit or dead_letter): commit the
  // offset of the first one plus this.
  std::size_t settled = 0;
  // How long to wait before reading the partition again from there: the delay of the first
  // retry_later; zero when the whole batch is done.
  Duration wait{};
};

inline PartitionProgress partition_progress(std::span<const Ack> acks) noexcept {
  PartitionProgress p;
  while (p.settled < acks.size() && acks[p.settled].action != Ack::retry_later)
    ++p.settled;
  if (p.settled < acks.size()) p.wait = acks[p.settled].delay;
  return p;
}

}  // namespace idem
