#pragma once
// The case of consume_batch's window (idem/consume.hpp, detail::BatchWindow), for the blocking
// and the coroutine consume_batch alike: message 0 of a batch outlasts half the lease in real
// time and the whole lease on the store's clock; meanwhile another consumer, a thread of its
// own, takes message 1's expired claim over and runs it. The batch must run neither 1 nor 2.
#include <chrono>
#include <cstddef>
#include <optional>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/clock.hpp>
#include <idem/consume.hpp>
#include <idem/memory_store.hpp>

namespace idem_test {

struct BatchWindowCase {
  idem::ManualClock clock;
  idem::MemoryStore memory{[this] { return clock.now(); }};
  const std::vector<idem::ClaimRequest> batch{
      {{"order.paid", "L-1"}, "fp"}, {{"order.paid", "L-2"}, "fp"}, {{"order.paid", "L-3"}, "fp"}};
  // Long enough that the batch's own claim never takes half of it.
  const idem::Options options{.lease = std::chrono::seconds{1}};
  // How long message 0 runs in real time: past half the lease.
  const std::chrono::milliseconds past_half{600};
  std::vector<int> runs = std::vector<int>(3);
  std::optional<idem::Ack> other;  // the other consumer's answer

  // Counts a run of message i; true for message 0, whose business must then wait past_half
  // and call overtake().
  bool ran(std::size_t i) { return ++runs[i] == 1 && i == 0; }

  void overtake() {
    clock.advance(std::chrono::milliseconds{1500});  // every claim of the batch expired
    std::thread([this] {
      other = idem::consume(
          memory, batch[1].key, "fp", [this] { ++runs[1]; }, options);
    }).join();
  }

  // The first delivery's answers.
  void check_first(const std::vector<idem::Ack>& acks) {
    REQUIRE(other);
    CHECK((*other == idem::Ack::commit && other->verdict == idem::Verdict::acquired));
    REQUIRE(acks.size() == 3);
    CHECK(acks[0] == idem::Ack::commit);
    for (std::size_t i = 1; i < 3; ++i) {
      INFO("message " << i);
      CHECK((acks[i] == idem::Ack::retry_later && acks[i].verdict == idem::Verdict::acquired));
      CHECK_THAT(acks[i].reason, Catch::Contains("half of its lease"));
    }
    CHECK(runs == std::vector<int>{1, 1, 0});
    CHECK(memory.find(batch[1].key)->ticket.fence == 2);  // the other consumer's record stands
    // Message 2 was failed retryably at once (not left to its lease), saying why.
    CHECK(memory.find(batch[2].key)->retryable);
    CHECK_THAT(memory.find(batch[2].key)->snapshot, Catch::Contains("idem.batch_window"));
  }

  // The redelivery's: what ran replays, what was given back runs, once.
  void check_redelivered(const std::vector<idem::Ack>& again) {
    REQUIRE(again.size() == 3);
    for (const idem::Ack& ack : again)
      CHECK(ack == idem::Ack::commit);
    CHECK(again[1].verdict == idem::Verdict::replayed);
    CHECK(runs == std::vector<int>{1, 1, 1});
  }
};

}  // namespace idem_test
