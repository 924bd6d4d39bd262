// A Kafka-shaped consumer group on an in-process partitioned log: consume_batch per polled
// batch, the offset committed as idem::partition_progress says (idem/partition_progress.hpp),
// consumers that crash before committing and partitions that move between consumers. Each
// payment runs once, a poison one is dead-lettered after its attempts, nothing is lost.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <idem/consume.hpp>
#include <idem/memory_store.hpp>
#include <idem/partition_progress.hpp>

namespace {

struct LogPartition {
  std::vector<std::string> messages;  // the trade number each message carries
  std::size_t committed = 0;          // the next offset to read
  std::chrono::steady_clock::time_point paused_until{};
  bool taken = false;  // read by a consumer right now
};

// The group: partitions, the dead-letter topic, and what the business did.
struct ConsumerGroup {
  std::mutex mutex;
  std::vector<LogPartition> partitions;
  std::vector<std::string> dead_letter_topic;
  std::map<std::string, int> runs;     // business executions per trade number
  std::map<std::string, int> credits;  // successful ones
  std::set<std::string> poison;
  std::map<std::string, int> fail_first;  // flaky trade number -> executions that fail

  bool drained() {
    std::lock_guard lock(mutex);
    return std::all_of(partitions.begin(), partitions.end(),
                       [](const LogPartition& p) { return p.committed == p.messages.size(); });
  }
  // Takes a partition that is not paused and has messages left; -1 when none now.
  int take() {
    std::lock_guard lock(mutex);
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < partitions.size(); ++i) {
      LogPartition& p = partitions[i];
      if (!p.taken && p.paused_until <= now && p.committed < p.messages.size()) {
        p.taken = true;
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  void business(const std::string& trade) {
    std::lock_guard lock(mutex);
    const int n = ++runs[trade];
    if (poison.count(trade) != 0) throw std::runtime_error("the account is closed");
    if (auto it = fail_first.find(trade); it != fail_first.end() && n <= it->second) {
      throw std::runtime_error("the ledger timed out");
    }
    ++credits[trade];
  }
};

}  // namespace

TEST_CASE("partitioned log: offsets committed by partition_progress - each payment once") {
  constexpr int partitions = 3;
  constexpr int per_partition = 400;
  constexpr std::size_t max_poll = 16;
  ConsumerGroup group;
  std::mt19937 rng(7);
  for (int p = 0; p < partitions; ++p) {
    LogPartition part;
    for (int i = 0; i < per_partition; ++i) {
      const std::string trade = "P" + std::to_string(p) + "-" + std::to_string(i);
      part.messages.push_back(trade);
      // 12% duplicates: a copy of a recent message, sometimes in the same poll.
      if (i % 8 == 7)
        part.messages.push_back("P" + std::to_string(p) + "-" + std::to_string(i - rng() % 4));
    }
    group.partitions.push_back(std::move(part));
  }
  group.poison = {"P0-50", "P2-333"};
  group.fail_first = {{"P1-10", 2}, {"P1-200", 1}};

  idem::MemoryStore store;
  const idem::ConsumerPolicy policy{.max_attempts = 3,
                                    .first_delay = std::chrono::milliseconds{2},
                                    .max_delay = std::chrono::milliseconds{8}};
  std::atomic<int> crashes{0};
  std::vector<std::thread> consumers;
  for (int c = 0; c < 4; ++c) {
    consumers.emplace_back([&, c] {
      std::mt19937 chance(static_cast<unsigned>(100 + c));
      while (!group.drained()) {
        const int taken = group.take();
        if (taken < 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds{1});
          continue;
        }
        LogPartition& part = group.partitions[static_cast<std::size_t>(taken)];
        std::vector<idem::ClaimRequest> batch;
        std::size_t first = 0;
        {
          std::lock_guard lock(group.mutex);
          first = part.committed;
          const std::size_t last = std::min(part.messages.size(), first + max_poll);
          for (std::size_t o = first; o < last; ++o)
            batch.push_back({{"payment.credit", part.messages[o]}, ""});
        }
        const std::vector<idem::Ack> acks = idem::consume_batch(
            store, batch, [&](std::size_t i) { group.business(batch[i].key.id()); },
            {.consumer = &policy});
        const idem::PartitionProgress progress = idem::partition_progress(acks);
        std::lock_guard lock(group.mutex);
        if (chance() % 10 == 0) {
          // The consumer dies before it commits: the next reader of the partition polls the
          // same messages again.
          ++crashes;
        } else {
          for (std::size_t i = 0; i < progress.settled; ++i) {
            if (acks[i] == idem::Ack::dead_letter) {
              group.dead_letter_topic.push_back(batch[i].key.id());
            }
          }
          part.committed = first + progress.settled;
          part.paused_until = std::chrono::steady_clock::now() + progress.wait;
        }
        part.taken = false;  // a rebalance: any consumer may read it next
      }
    });
  }
  for (auto& t : consumers)
    t.join();

  CHECK(crashes > 0);
  std::lock_guard lock(group.mutex);
  int payments = 0;
  for (const LogPartition& p : group.partitions) {
    for (const std::string& trade : std::set<std::string>(p.messages.begin(), p.messages.end())) {
      ++payments;
      if (group.poison.count(trade) != 0) {
        CHECK(group.runs[trade] == 3);  // max_attempts, never more
        CHECK(group.credits[trade] == 0);
        CHECK(std::count(group.dead_letter_topic.begin(), group.dead_letter_topic.end(), trade) >=
              1);
      } else {
        INFO(trade);
        CHECK(group.credits[trade] == 1);  // once, however often it was polled
        const auto flaky = group.fail_first.find(trade);
        CHECK(group.runs[trade] == 1 + (flaky == group.fail_first.end() ? 0 : flaky->second));
      }
    }
  }
  CHECK(payments == partitions * per_partition);
  // Only poison reaches the dead-letter topic (a copy polled again after a crash may send it
  // twice: the topic is at-least-once too).
  for (const std::string& trade : group.dead_letter_topic)
    CHECK(group.poison.count(trade) == 1);
}
