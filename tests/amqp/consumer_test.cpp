// idem::amqp::Consumer against a real RabbitMQ broker (the fixture's): payments credited in a
// SQLite business table, in the same transaction as their records, counted where they land.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <idem/amqp.hpp>
#include <idem/sqlite.hpp>

#include "../support/rabbitmq_broker.hpp"
#include "../support/sqlite_file.hpp"

using idem_test::broker;
using idem_test::WorkQueue;
using namespace std::chrono_literals;

namespace {

struct Payment {
  std::string trade_no;
  std::int64_t amount = 0;
};

// What makes a message unusable whoever sends it: the consumer dead-letters it unclaimed.
Payment parse_payment(const idem::amqp::Message& m) {
  const nlohmann::json j = nlohmann::json::parse(m.body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw idem::InvalidMessage("the body is not a JSON object");
  if (!j.contains("trade_no") || !j["trade_no"].is_string() ||
      j["trade_no"].get<std::string>().empty()) {
    throw idem::InvalidMessage("no trade_no: the message carries no idempotency key");
  }
  if (!j.contains("amount") || !j["amount"].is_number_integer() ||
      j["amount"].get<std::int64_t>() <= 0) {
    throw idem::InvalidMessage("the amount is missing or not a positive integer");
  }
  return {j["trade_no"].get<std::string>(), j["amount"].get<std::int64_t>()};
}

std::string payment_body(const std::string& trade_no, std::int64_t amount = 100) {
  return nlohmann::json{{"trade_no", trade_no}, {"amount", amount}}.dump();
}

// The payments service: one SQLite file holds the credits and the records.
struct Ledger {
  idem_test::TempDir dir;
  idem::sqlite::Store store{dir / "ledger.db"};
  Ledger() { idem_test::create_business_table(store); }

  // Credits the payment once, in one transaction with its record; `business` runs inside.
  template <class Business>
  idem::Ack credit(const idem::amqp::Message& m, const idem::ConsumerPolicy& policy,
                   Business&& business) {
    const Payment p = parse_payment(m);
    return idem::through_store_outage(policy, [&] {
      return idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
        auto tx = store.bind(c);
        return idem::consume(tx, idem::Key{"payment.credit", p.trade_no}, idem::fingerprint(m.body),
                             [&] {
                               business(p);
                               idem_test::insert_business_row(c.native(), p.trade_no);
                             },
                             {.consumer = &policy});
      });
    });
  }
  idem::Ack credit(const idem::amqp::Message& m, const idem::ConsumerPolicy& policy) {
    return credit(m, policy, [](const Payment&) {});
  }

  std::int64_t credits() { return idem_test::scalar(store, "SELECT COUNT(*) FROM biz"); }
  std::int64_t credited_twice() {
    return idem_test::scalar(
        store,
        "SELECT COUNT(*) FROM (SELECT trade_no FROM biz GROUP BY trade_no HAVING COUNT(*) > 1)");
  }
};

// Runs consumer.run(handler) on a thread of its own, stopped and joined at the end.
class Running {
 public:
  template <class Handler>
  Running(idem::amqp::Consumer& consumer, Handler handler)
      : consumer_(consumer), thread_([this, handler]() mutable {
          try {
            consumer_.run(handler);
          } catch (const std::exception& e) {
            std::lock_guard lock(mutex_);
            error_ = e.what();
          }
        }) {}
  ~Running() { stop(); }
  void stop() {
    consumer_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string error() {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  idem::amqp::Consumer& consumer_;
  std::mutex mutex_;
  std::string error_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("consumers credit each payment once through connections the broker closes") {
  WorkQueue queue;
  Ledger ledger;
  constexpr int payments = 600;
  constexpr int duplicates = 72;  // 12%
  {
    idem::amqp::Channel producer(broker());
    for (int i = 0; i < payments; ++i)
      producer.publish("", queue.name, payment_body("T" + std::to_string(i)));
    for (int i = 0; i < duplicates; ++i)
      producer.publish("", queue.name, payment_body("T" + std::to_string(i * 7 % payments)));
  }
  const idem::ConsumerPolicy policy{.max_attempts = 5, .first_delay = 10ms, .store_outage = 10s};
  const idem::amqp::ConsumerParams params{
      .queue = queue.name, .prefetch = 20, .ack_batch = 8, .reconnect_first = 50ms};
  idem::amqp::Consumer a(broker(), params);
  idem::amqp::Consumer b(broker(), params);
  auto handler = [&](const idem::amqp::Message& m) { return ledger.credit(m, policy); };
  Running ra(a, handler);
  Running rb(b, handler);

  // The broker closes every connection twice while the queue drains.
  REQUIRE(idem_test::eventually([&] { return ledger.credits() >= payments / 4; }));
  idem_test::broker_ctl("close_all_connections 'idem test: closed by the broker'");
  REQUIRE(idem_test::eventually([&] { return ledger.credits() >= payments / 2; }));
  idem_test::broker_ctl("close_all_connections 'idem test: closed by the broker'");

  CHECK(idem_test::eventually([&] { return ledger.credits() >= payments; }));
  CHECK(idem_test::eventually(
      [&] { return a.stats().committed + b.stats().committed >= payments + duplicates; }));
  ra.stop();
  rb.stop();
  CHECK(ra.error().empty());
  CHECK(rb.error().empty());
  CHECK(ledger.credits() == payments);
  CHECK(ledger.credited_twice() == 0);
  const auto sa = a.stats();
  const auto sb = b.stats();
  CHECK(sa.reconnects + sb.reconnects >= 2);
  CHECK(sa.dead_lettered + sb.dead_lettered == 0);
  CHECK(queue.dead_lettered() == 0);
  // Nothing left behind: every delivery was settled on the broker.
  CHECK(idem_test::eventually([&] { return queue.ready() == 0; }, 10s));
}

TEST_CASE("a poison payment is delivered max_attempts times, then dead-lettered, never again") {
  WorkQueue queue;
  Ledger ledger;
  const idem::ConsumerPolicy policy{.max_attempts = 3, .first_delay = 20ms};
  std::atomic<int> poison_runs{0};
  {
    idem::amqp::Channel producer(broker());
    producer.publish("", queue.name, payment_body("good-1"));
    producer.publish("", queue.name, payment_body("poison"));
    producer.publish("", queue.name, payment_body("good-2"));
  }
  idem::amqp::Consumer consumer(broker(), {.queue = queue.name});
  std::mutex mutex;
  std::vector<std::string> dead_reasons;
  consumer.on_settled = [&](const idem::amqp::Message&, const idem::Ack& ack) {
    if (ack == idem::Ack::dead_letter) {
      std::lock_guard lock(mutex);
      dead_reasons.push_back(ack.reason);
    }
  };
  Running running(consumer, [&](const idem::amqp::Message& m) {
    return ledger.credit(m, policy, [&](const Payment& p) {
      if (p.trade_no == "poison") {
        ++poison_runs;
        throw std::runtime_error("the ledger rejects this account");
      }
    });
  });
  REQUIRE(idem_test::eventually([&] { return queue.dead_lettered() == 1; }));
  std::this_thread::sleep_for(300ms);  // time enough for another delivery, were there one
  running.stop();
  CHECK(running.error().empty());
  CHECK(poison_runs == 3);
  CHECK(consumer.stats().delivered == 2 + 3);
  CHECK(consumer.stats().redelivered == 2);
  CHECK(ledger.credits() == 2);  // the poison's rows rolled back each time
  const auto record = ledger.store.find({"payment.credit", "poison"});
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK_FALSE(record->retryable);
  std::lock_guard lock(mutex);
  REQUIRE(dead_reasons.size() == 1);
  CHECK_THAT(dead_reasons[0], Catch::Contains("gave up after 3 attempts") &&
                                  Catch::Contains("the ledger rejects this account"));
}

TEST_CASE("malformed and keyless messages are dead-lettered with a reason and claim nothing") {
  WorkQueue queue;
  Ledger ledger;
  const idem::ConsumerPolicy policy{};
  {
    idem::amqp::Channel producer(broker());
    producer.publish("", queue.name, "not json at all");
    producer.publish("", queue.name, R"({"amount":100})");
    producer.publish("", queue.name, R"({"trade_no":"T-neg","amount":-5})");
    producer.publish("", queue.name, payment_body("T-ok"));
  }
  idem::amqp::Consumer consumer(broker(), {.queue = queue.name});
  std::mutex mutex;
  std::map<std::string, std::string> reasons;  // body -> reason
  consumer.on_settled = [&](const idem::amqp::Message& m, const idem::Ack& ack) {
    if (ack == idem::Ack::dead_letter) {
      std::lock_guard lock(mutex);
      reasons[m.body] = ack.reason;
    }
  };
  Running running(consumer, [&](const idem::amqp::Message& m) { return ledger.credit(m, policy); });
  REQUIRE(idem_test::eventually([&] { return queue.dead_lettered() == 3; }));
  REQUIRE(idem_test::eventually([&] { return ledger.credits() == 1; }));
  running.stop();
  CHECK(consumer.stats().delivered == 4);  // each once
  CHECK(consumer.stats().dead_lettered == 3);
  CHECK(idem_test::count(ledger.store) == 1);  // only the valid payment has a record
  std::lock_guard lock(mutex);
  CHECK_THAT(reasons["not json at all"], Catch::Contains("not a JSON object"));
  CHECK_THAT(reasons[R"({"amount":100})"], Catch::Contains("no idempotency key"));
  CHECK_THAT(reasons[R"({"trade_no":"T-neg","amount":-5})"], Catch::Contains("amount"));
}

TEST_CASE("a payment to retry waits for its delay without holding up the others") {
  WorkQueue queue;
  Ledger ledger;
  const idem::ConsumerPolicy policy{.max_attempts = 5, .first_delay = 400ms};
  std::mutex mutex;
  std::map<std::string, std::vector<std::chrono::steady_clock::time_point>> runs;
  {
    idem::amqp::Channel producer(broker());
    producer.publish("", queue.name, payment_body("flaky"));
    for (int i = 0; i < 5; ++i)
      producer.publish("", queue.name, payment_body("steady-" + std::to_string(i)));
  }
  idem::amqp::Consumer consumer(broker(), {.queue = queue.name});
  Running running(consumer, [&](const idem::amqp::Message& m) {
    return ledger.credit(m, policy, [&](const Payment& p) {
      std::lock_guard lock(mutex);
      runs[p.trade_no].push_back(std::chrono::steady_clock::now());
      if (p.trade_no == "flaky" && runs[p.trade_no].size() == 1) {
        throw std::runtime_error("the bank timed out");
      }
    });
  });
  REQUIRE(idem_test::eventually([&] { return ledger.credits() == 6; }));
  running.stop();
  std::lock_guard lock(mutex);
  REQUIRE(runs["flaky"].size() == 2);
  CHECK(runs["flaky"][1] - runs["flaky"][0] >= 400ms);
  for (int i = 0; i < 5; ++i)  // the others went ahead while it was held
    CHECK(runs["steady-" + std::to_string(i)].at(0) < runs["flaky"][1]);
  CHECK(consumer.stats().retried == 1);
}

TEST_CASE("a batch consumer credits each payment once and dead-letters the malformed alone") {
  WorkQueue queue;
  Ledger ledger;
  constexpr int payments = 300;
  {
    idem::amqp::Channel producer(broker());
    for (int i = 0; i < payments; ++i) {
      producer.publish("", queue.name, payment_body("B" + std::to_string(i)));
      if (i % 8 == 7) producer.publish("", queue.name, payment_body("B" + std::to_string(i - 3)));
      if (i == 100) producer.publish("", queue.name, "{broken");
    }
  }
  const idem::ConsumerPolicy policy{.max_attempts = 5};
  std::atomic<std::size_t> largest_batch{0};
  idem::amqp::Consumer batch_consumer(broker(), {.queue = queue.name, .prefetch = 64});
  std::thread thread([&] {
    batch_consumer.run_batch(
        [&](std::span<const idem::amqp::Message> batch) {
          largest_batch = std::max(largest_batch.load(), batch.size());
          // A message that cannot claim is answered on its own; the others claim together.
          std::vector<idem::Ack> acks(batch.size());
          std::vector<idem::ClaimRequest> requests;
          std::vector<std::size_t> index;
          for (std::size_t i = 0; i < batch.size(); ++i) {
            try {
              requests.push_back({{"payment.credit", parse_payment(batch[i]).trade_no},
                                  idem::fingerprint(batch[i].body)});
              index.push_back(i);
            } catch (const idem::InvalidMessage& e) {
              acks[i] = {idem::Ack::dead_letter, std::nullopt, e.what()};
            }
          }
          const auto answered =
              idem::sqlite::with_transaction(ledger.store.pool(), [&](idem::sqlite::Connection& c) {
                auto tx = ledger.store.bind(c);
                return idem::consume_batch(tx, requests,
                                           [&](std::size_t j) {
                                             idem_test::insert_business_row(c.native(),
                                                                            requests[j].key.id());
                                           },
                                           {.consumer = &policy});
              });
          for (std::size_t j = 0; j < index.size(); ++j)
            acks[index[j]] = answered[j];
          return acks;
        },
        32);
  });
  constexpr std::uint64_t messages = payments + payments / 8 + 1;
  const bool drained = idem_test::eventually([&] {
    const auto s = batch_consumer.stats();
    return s.committed + s.dead_lettered >= messages;
  });
  CHECK(idem_test::eventually([&] { return queue.dead_lettered() == 1; }));
  batch_consumer.stop();
  thread.join();
  CHECK(drained);
  CHECK(ledger.credits() == payments);
  CHECK(ledger.credited_twice() == 0);
  CHECK(largest_batch > 1);  // the deliveries at hand were taken together
  CHECK(batch_consumer.stats().dead_lettered == 1);
  CHECK(idem_test::eventually([&] { return queue.ready() == 0; }, 10s));
}

TEST_CASE("stop returns promptly and gives the held deliveries back to the queue") {
  WorkQueue queue;
  Ledger ledger;
  const idem::ConsumerPolicy policy{.max_attempts = 5, .first_delay = 60s};
  queue.publish(payment_body("held"));
  idem::amqp::Consumer consumer(broker(), {.queue = queue.name});
  std::atomic<int> runs{0};
  Running running(consumer, [&](const idem::amqp::Message& m) {
    return ledger.credit(m, policy, [&](const Payment&) {
      ++runs;
      throw std::runtime_error("not yet");
    });
  });
  REQUIRE(idem_test::eventually([&] { return consumer.stats().retried == 1; }));
  const auto start = std::chrono::steady_clock::now();
  running.stop();
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(runs == 1);
  CHECK(idem_test::eventually([&] { return queue.ready() == 1; }, 10s));
}

TEST_CASE("a consumer without a broker keeps trying and stops when asked") {
  idem::amqp::ConnectionParams nowhere = broker();
  nowhere.port = 1;  // nothing listens there
  idem::amqp::Consumer consumer(nowhere,
                                {.queue = "none", .reconnect_first = 10ms, .reconnect_max = 20ms});
  std::atomic<int> failures{0};
  consumer.on_broker_error = [&](const idem::amqp::BrokerError&) { ++failures; };
  Running running(consumer, [](const idem::amqp::Message&) { return idem::Ack{}; });
  CHECK(idem_test::eventually([&] { return failures >= 3; }, 10s));
  running.stop();
  CHECK(consumer.stats().reconnects >= 2);
  CHECK(consumer.stats().delivered == 0);
}

TEST_CASE("consumer params with a broken rule are a typed error") {
  CHECK_THROWS_AS(idem::amqp::Consumer(broker(), {}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::amqp::Consumer(broker(), {.queue = "q", .prefetch = 0}),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(idem::amqp::Consumer(broker(), {.queue = "q", .reconnect_first = 0ms}),
                  idem::InvalidArgument);
}
