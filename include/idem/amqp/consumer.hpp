#pragma once
// idem::amqp::Consumer: a RabbitMQ queue consumed through a handler that answers each delivery
// with an idem::Ack (idem::consume's, usually), settled on the broker as the Ack says
// (idem/amqp/settlement.hpp), with the connection kept up.
//
//   idem::amqp::Consumer consumer({.host = "127.0.0.1", .port = 5672},
//                                 {.queue = "payments", .prefetch = 50});
//   consumer.run([&](const idem::amqp::Message& m) {
//     const Payment p = parse(m.body);  // throws idem::InvalidMessage when malformed
//     return idem::consume(store, {"payment.credit", p.trade_no}, idem::fingerprint(m.body),
//                          [&] { credit(p); }, {.consumer = &policy});
//   });  // until consumer.stop()
//
// What the handler answers or throws:
//   an Ack                 -> commit: acknowledged (in batches); retry_later: held for ack.delay,
//                             then requeued; dead_letter: rejected to the queue's dead-letter
//                             exchange. on_settled sees each, with its reason.
//   idem::InvalidMessage   -> dead_letter with its text as the reason
//   anything else (a StoreError that outlasted the policy's store_outage, a LeaseLost, ...)
//                          -> not settled by the handler: held for store_error_delay
//                             (doubling while they follow each other), then requeued; the
//                             record answers the redelivery
// A lost connection or channel (a broker restart, a connection closed by the broker, a
// heartbeat missed) is reopened after a backoff; the deliveries not yet settled come back
// from the broker, and the record replays those that had run.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/amqp/channel.hpp"
#include "idem/amqp/connection_params.hpp"
#include "idem/amqp/errors.hpp"
#include "idem/amqp/message.hpp"
#include "idem/amqp/settlement.hpp"
#include "idem/clock.hpp"
#include "idem/consume.hpp"
#include "idem/errors.hpp"
#include "idem/retry_policy.hpp"

namespace idem::amqp {

struct ConsumerParams {
  std::string queue{};
  // Deliveries the broker sends before earlier ones are settled (basic.qos). At least 1.
  std::uint16_t prefetch = 50;
  // Acknowledgements sent together (one basic.ack with `multiple` where the tags allow); they
  // also go out whenever no delivery waits to be handled. At least 1.
  std::size_t ack_batch = 32;
  // How long the consumer waits for a delivery before it looks at its held deliveries and at
  // stop().
  Duration poll = std::chrono::milliseconds{100};
  // After a lost connection: the first pause before reconnecting, doubling up to the second.
  Duration reconnect_first = std::chrono::milliseconds{100};
  Duration reconnect_max = std::chrono::seconds{5};
  // How long a delivery whose handler threw (not InvalidMessage) is held before it is
  // requeued, doubling while failures follow each other, up to reconnect_max.
  Duration store_error_delay = std::chrono::seconds{1};
};

// Counts since the Consumer was made, for dashboards: read them with stats().
struct ConsumerStats {
  std::uint64_t delivered = 0;
  std::uint64_t redelivered = 0;  // deliveries with the broker's redelivered flag set
  std::uint64_t committed = 0;
  std::uint64_t retried = 0;  // requeued after retry_later (or a handler's exception)
  std::uint64_t dead_lettered = 0;
  std::uint64_t handler_errors = 0;  // deliveries whose handler threw (InvalidMessage excepted)
  std::uint64_t reconnects = 0;
};

// Throws idem::InvalidArgument when a field breaks its rule.
inline void validate(const ConsumerParams& p) {
  const auto bad = [](std::string_view what) {
    throw InvalidArgument(fmt::format("idem::amqp::ConsumerParams: {}", what));
  };
  if (p.queue.empty()) bad("queue is empty");
  if (p.prefetch < 1) bad("prefetch must be at least 1");
  if (p.ack_batch < 1) bad("ack_batch must be at least 1");
  if (p.poll < Duration{1}) bad("poll must be at least 1 ms");
  if (p.reconnect_first < Duration{1} || p.reconnect_max < p.reconnect_first) {
    bad("reconnect_first must be at least 1 ms and reconnect_max at least reconnect_first");
  }
  if (p.store_error_delay < Duration::zero()) bad("store_error_delay must be at least 0");
}

class Consumer {
 public:
  Consumer(ConnectionParams connection, ConsumerParams params)
      : connection_(std::move(connection)), params_(std::move(params)) {
    validate(params_);
  }

  // Called with each delivery and its Ack as it is settled (a dead letter's reason, say); on
  // the consuming thread, must not throw.
  std::function<void(const Message&, const Ack&)> on_settled;
  // Called with each broker failure before the consumer reconnects; must not throw.
  std::function<void(const BrokerError&)> on_broker_error;

  // Consumes until stop(): handle(message) -> idem::Ack for each delivery, in order.
  template <class Handler>
  requires std::is_invocable_r_v<Ack, Handler&, const Message&>
  void run(Handler&& handle) {
    loop(1, [&](std::span<const Message> batch, std::vector<Ack>& acks) {
      acks.push_back(answer([&] { return handle(batch.front()); }));
    });
  }

  // The same a batch at a time: handle(messages) -> one Ack per message (idem::consume_batch's),
  // for the deliveries already at hand, at most max_batch.
  template <class Handler>
  requires std::is_invocable_r_v<std::vector<Ack>, Handler&, std::span<const Message>> void
  run_batch(Handler&& handle, std::size_t max_batch) {
    if (max_batch < 1) throw InvalidArgument("idem::amqp::Consumer: max_batch must be at least 1");
    loop(max_batch, [&](std::span<const Message> batch, std::vector<Ack>& acks) {
      std::vector<Ack> answered;
      try {
        answered = handle(batch);
        failure_delay_ = params_.store_error_delay;
      } catch (const InvalidMessage& e) {
        answered.assign(batch.size(), Ack{Ack::dead_letter, std::nullopt, e.what()});
      } catch (const std::exception& e) {
        answered.assign(batch.size(), not_settled(e.what()));
      } catch (...) {
        answered.assign(batch.size(), not_settled("a non-standard exception"));
      }
      if (answered.size() != batch.size()) {
        throw UsageError(
            fmt::format("idem::amqp::Consumer: the batch handler answered {} acks "
                        "for {} messages",
                        answered.size(), batch.size()));
      }
      acks = std::move(answered);
    });
  }

  // Asks run() to return: it settles what it has and returns within about `poll`. Any thread.
  void stop() noexcept { stopping_.store(true, std::memory_order_release); }

  ConsumerStats stats() const noexcept {
    ConsumerStats s;
    s.delivered = delivered_.load(std::memory_order_relaxed);
    s.redelivered = redelivered_.load(std::memory_order_relaxed);
    s.committed = committed_.load(std::memory_order_relaxed);
    s.retried = retried_.load(std::memory_order_relaxed);
    s.dead_lettered = dead_lettered_.load(std::memory_order_relaxed);
    s.handler_errors = handler_errors_.load(std::memory_order_relaxed);
    s.reconnects = reconnects_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  using Clock = Settlement::Clock;

  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }

  template <class Handle>
  Ack answer(Handle&& handle) {
    try {
      Ack a = handle();
      failure_delay_ = params_.store_error_delay;
      return a;
    } catch (const InvalidMessage& e) {
      return {Ack::dead_letter, std::nullopt, e.what()};
    } catch (const std::exception& e) {
      return not_settled(e.what());
    } catch (...) {
      return not_settled("a non-standard exception");
    }
  }

  // A handler that threw: the delivery waits, longer while failures follow each other.
  Ack not_settled(const std::string& what) {
    handler_errors_.fetch_add(1, std::memory_order_relaxed);
    const Duration delay = failure_delay_;
    failure_delay_ = std::min(std::max(failure_delay_ * 2, Duration{1}), params_.reconnect_max);
    return {Ack::retry_later, std::nullopt, fmt::format("the handler threw: {}", what), delay};
  }

  // Sleeps up to d, returning early on stop().
  void pause(Duration d) const {
    const auto until = Clock::now() + d;
    while (!stopping() && Clock::now() < until) {
      std::this_thread::sleep_for(std::min<Clock::duration>(params_.poll, until - Clock::now()));
    }
  }

  template <class Handle>
  void loop(std::size_t max_batch, Handle&& handle) {
    Backoff reconnect(params_.reconnect_first, params_.reconnect_max);
    while (!stopping()) {
      try {
        Channel channel(connection_);
        channel.qos(params_.prefetch);
        channel.consume(params_.queue);
        reconnect = Backoff(params_.reconnect_first, params_.reconnect_max);
        consume(channel, max_batch, handle);
        return;
      } catch (const BrokerError& e) {
        if (on_broker_error) on_broker_error(e);
        if (stopping()) return;
        reconnects_.fetch_add(1, std::memory_order_relaxed);
        pause(reconnect.next());
      }
    }
  }

  template <class Handle>
  void consume(Channel& channel, std::size_t max_batch, Handle& handle) {
    Settlement settlement({.ack_batch = params_.ack_batch});
    std::vector<Message> batch;
    std::vector<Ack> acks;
    while (!stopping()) {
      Duration wait = params_.poll;
      if (const auto due = settlement.next_due()) {
        const auto left = std::chrono::ceil<Duration>(*due - Clock::now());
        wait = std::clamp(left, Duration::zero(), wait);
      }
      batch.clear();
      if (auto m = channel.next(wait)) batch.push_back(std::move(*m));
      while (!batch.empty() && batch.size() < max_batch && channel.buffered()) {
        auto more = channel.next(Duration::zero());
        if (!more) break;
        batch.push_back(std::move(*more));
      }
      for (const Message& m : batch) {
        settlement.delivered(m.delivery_tag);
        delivered_.fetch_add(1, std::memory_order_relaxed);
        if (m.redelivered) redelivered_.fetch_add(1, std::memory_order_relaxed);
      }
      if (!batch.empty()) {
        acks.clear();
        handle(std::span<const Message>(batch), acks);
        const auto now = Clock::now();
        for (std::size_t i = 0; i < batch.size(); ++i) {
          settlement.settle(batch[i].delivery_tag, acks[i], now);
          count(acks[i]);
          if (on_settled) on_settled(batch[i], acks[i]);
        }
      }
      send(channel, settlement.due(Clock::now(), !channel.buffered()));
    }
    // Stopping: what was answered goes back to the broker now, the held ones requeued at once.
    send(channel, settlement.due(Clock::time_point::max(), true));
  }

  void count(const Ack& ack) noexcept {
    switch (ack.action) {
      case Ack::commit:
        committed_.fetch_add(1, std::memory_order_relaxed);
        break;
      case Ack::retry_later:
        retried_.fetch_add(1, std::memory_order_relaxed);
        break;
      case Ack::dead_letter:
        dead_lettered_.fetch_add(1, std::memory_order_relaxed);
        break;
    }
  }

  static void send(Channel& channel, const std::vector<Settlement::Action>& actions) {
    for (const Settlement::Action& a : actions) {
      switch (a.kind) {
        case Settlement::Action::ack:
          channel.ack(a.tag, a.multiple);
          break;
        case Settlement::Action::requeue:
          channel.nack(a.tag, true);
          break;
        case Settlement::Action::reject:
          channel.reject(a.tag, false);
          break;
      }
    }
  }

  ConnectionParams connection_;
  ConsumerParams params_;
  std::atomic<bool> stopping_{false};
  Duration failure_delay_ = params_.store_error_delay;
  std::atomic<std::uint64_t> delivered_{0};
  std::atomic<std::uint64_t> redelivered_{0};
  std::atomic<std::uint64_t> committed_{0};
  std::atomic<std::uint64_t> retried_{0};
  std::atomic<std::uint64_t> dead_lettered_{0};
  std::atomic<std::uint64_t> handler_errors_{0};
  std::atomic<std::uint64_t> reconnects_{0};
};

}  // namespace idem::amqp
