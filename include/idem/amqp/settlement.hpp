#pragma once
// idem::amqp::Settlement: how the deliveries of one channel are settled as their Acks say,
// without I/O. A Consumer drives it; a service that already runs its own channel (its own
// event loop, its own client) can drive it too and send the Actions it answers.
//
//   settlement.delivered(tag);                      // a delivery arrived
//   settlement.settle(tag, ack, now);                // idem::consume answered it
//   for (const Action& a : settlement.due(now, idle)) send(a);  // basic.ack / nack / reject
//
// The rules:
//   commit      -> acknowledged, in batches: one basic.ack with `multiple` covers every tag up
//                  to it once none below it is still unsettled, else each on its own
//   retry_later -> held for ack.delay, then basic.nack with requeue (delay zero: at once); the
//                  broker delivers it again, to this consumer or another
//   dead_letter -> basic.reject without requeue, at once: the queue's dead-letter exchange
//                  takes it
// A channel that is lost takes its unsettled deliveries with it (the broker delivers them
// again): reset() forgets them.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "idem/clock.hpp"
#include "idem/consume.hpp"
#include "idem/errors.hpp"

namespace idem::amqp {

struct SettlementParams {
  // Acknowledgements kept before they are sent (due() also sends them when the consumer is
  // idle). 1: each at once. At least 1.
  std::size_t ack_batch = 32;
};

class Settlement {
 public:
  using Clock = std::chrono::steady_clock;
  struct Action {
    enum Kind { ack, requeue, reject };
    Kind kind = ack;
    std::uint64_t tag = 0;
    bool multiple = false;  // ack: every unsettled tag up to this one

    friend bool operator==(const Action&, const Action&) = default;
  };

  explicit Settlement(SettlementParams params = {}) : params_(params) {
    if (params_.ack_batch < 1) {
      throw InvalidArgument("idem::amqp::Settlement: ack_batch must be at least 1");
    }
  }

  // A delivery arrived and waits for its Ack.
  void delivered(std::uint64_t tag) {
    if (!open_.insert(tag).second) {
      throw UsageError(fmt::format("idem::amqp::Settlement: delivery {} arrived twice", tag));
    }
  }

  // Its Ack came; what to send goes out with the next due().
  void settle(std::uint64_t tag, const Ack& answer, Clock::time_point now) {
    if (open_.erase(tag) == 0) {
      throw UsageError(
          fmt::format("idem::amqp::Settlement: delivery {} is not waiting for an ack", tag));
    }
    switch (answer.action) {
      case Ack::commit:
        acks_.insert(tag);
        break;
      case Ack::retry_later:
        held_.emplace(tag, now + answer.delay);
        break;
      case Ack::dead_letter:
        rejects_.push_back(tag);
        break;
    }
  }

  // What to send now: the rejects, the held deliveries whose time has come, and the
  // acknowledgements when `idle` (no delivery waits to be handled) or ack_batch are kept.
  std::vector<Action> due(Clock::time_point now, bool idle) {
    std::vector<Action> out;
    for (std::uint64_t tag : rejects_)
      out.push_back({Action::reject, tag, false});
    rejects_.clear();
    for (auto it = held_.begin(); it != held_.end();) {
      if (it->second <= now) {
        out.push_back({Action::requeue, it->first, false});
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    if (!acks_.empty() && (idle || acks_.size() >= params_.ack_batch)) send_acks(out);
    return out;
  }

  // When the next held delivery is due, if any is held.
  std::optional<Clock::time_point> next_due() const {
    std::optional<Clock::time_point> first;
    for (const auto& [tag, at] : held_) {
      if (!first || at < *first) first = at;
    }
    return first;
  }

  // Deliveries not yet sent back to the broker (handled or not): what a lost channel takes.
  std::size_t unsettled() const noexcept {
    return open_.size() + acks_.size() + held_.size() + rejects_.size();
  }
  std::size_t held() const noexcept { return held_.size(); }

  // The channel is gone: its deliveries come again from the broker, on a new channel with new
  // tags.
  void reset() noexcept {
    open_.clear();
    acks_.clear();
    held_.clear();
    rejects_.clear();
  }

 private:
  // One multiple ack for the acknowledged tags below the first tag still unsettled, the rest
  // each on its own.
  void send_acks(std::vector<Action>& out) {
    std::optional<std::uint64_t> lowest_unsettled;
    if (!open_.empty()) lowest_unsettled = *open_.begin();
    if (!held_.empty()) {
      const std::uint64_t h = held_.begin()->first;
      if (!lowest_unsettled || h < *lowest_unsettled) lowest_unsettled = h;
    }
    auto below = lowest_unsettled ? acks_.lower_bound(*lowest_unsettled) : acks_.end();
    if (below != acks_.begin()) {
      const std::uint64_t last = *std::prev(below);
      out.push_back({Action::ack, last, std::distance(acks_.begin(), below) > 1});
    }
    for (auto it = below; it != acks_.end(); ++it)
      out.push_back({Action::ack, *it, false});
    acks_.clear();
  }

  SettlementParams params_;
  std::set<std::uint64_t> open_;                     // delivered, waiting for their Ack
  std::set<std::uint64_t> acks_;                     // to acknowledge
  std::map<std::uint64_t, Clock::time_point> held_;  // to requeue at that time
  std::vector<std::uint64_t> rejects_;               // to reject
};

}  // namespace idem::amqp
