// A payments consumer on RabbitMQ: each message credits a payment to an account, in MariaDB,
// in the same transaction as its idempotency record, so a redelivered, duplicated or replayed
// message credits it once, and a consumer killed at any instant leaves nothing half-done.
//
//   idem_amqp_consumer --amqp HOST:PORT --queue NAME --mysql-socket PATH
//                      [--database NAME] [--records TABLE] [--credits TABLE]
//                      [--max-attempts N] [--prefetch N]
//
// Message body: {"trade_no": "T-1001", "account": "A-7", "amount": 100}. The key is the trade
// number (biz type "payment.credit"), never the broker's message id. A malformed message or
// one without a trade number is dead-lettered (the queue's dead-letter exchange) before it
// can claim anything; a payment whose credit keeps failing is dead-lettered after
// --max-attempts deliveries, its key recording the last error; a database restart is waited
// out (up to 30 s) without using up deliveries.
//
// Runs until SIGTERM or SIGINT, then settles what it has and prints its counts as one JSON
// line on stdout.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <idem/amqp.hpp>
#include <idem/mysql.hpp>

namespace {

idem::amqp::Consumer* running = nullptr;

extern "C" void on_signal(int) {
  if (running != nullptr) running->stop();  // an atomic store: safe in a signal handler
}

struct Payment {
  std::string trade_no;
  std::string account;
  std::int64_t amount = 0;
};

// Everything that makes a message unusable whoever sends it, checked before its claim.
Payment parse(const idem::amqp::Message& m) {
  const nlohmann::json j = nlohmann::json::parse(m.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw idem::InvalidMessage("the body is not a JSON object");
  }
  const auto text = [&](const char* field) -> std::string {
    if (!j.contains(field) || !j[field].is_string() || j[field].get<std::string>().empty()) {
      throw idem::InvalidMessage(std::string("no ") + field);
    }
    return j[field].get<std::string>();
  };
  Payment p{text("trade_no"), text("account"), 0};
  if (!j.contains("amount") || !j["amount"].is_number_integer() ||
      j["amount"].get<std::int64_t>() <= 0) {
    throw idem::InvalidMessage("the amount is missing or not a positive integer");
  }
  p.amount = j["amount"].get<std::int64_t>();
  return p;
}

void usage() {
  std::fprintf(stderr,
               "usage: idem_amqp_consumer --amqp HOST:PORT --queue NAME --mysql-socket PATH\n"
               "                          [--database NAME] [--records TABLE] [--credits TABLE]\n"
               "                          [--max-attempts N] [--prefetch N]\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string broker = "127.0.0.1:5672", queue, socket, database = "idem_demo";
  std::string records = "idempotent_record", credits = "credits";
  unsigned max_attempts = 5, prefetch = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--amqp" && has_value) {
      broker = argv[++i];
    } else if (arg == "--queue" && has_value) {
      queue = argv[++i];
    } else if (arg == "--mysql-socket" && has_value) {
      socket = argv[++i];
    } else if (arg == "--database" && has_value) {
      database = argv[++i];
    } else if (arg == "--records" && has_value) {
      records = argv[++i];
    } else if (arg == "--credits" && has_value) {
      credits = argv[++i];
    } else if (arg == "--max-attempts" && has_value) {
      max_attempts = static_cast<unsigned>(std::stoul(argv[++i]));
    } else if (arg == "--prefetch" && has_value) {
      prefetch = static_cast<unsigned>(std::stoul(argv[++i]));
    } else {
      usage();
      return 2;
    }
  }
  const auto colon = broker.rfind(':');
  if (queue.empty() || socket.empty() || colon == std::string::npos) {
    usage();
    return 2;
  }
  try {
    idem::mysql::ConnectionParams db;
    db.unix_socket = socket;
    idem::mysql::Connection{db}.query("CREATE DATABASE IF NOT EXISTS `" + database + "`");
    db.database = database;
    auto pool = std::make_shared<idem::mysql::Pool>(db, idem::mysql::PoolParams{.size = 2});
    idem::mysql::Store store{pool, {.table = records}};
    store.ensure_schema();
    pool->acquire()->query("CREATE TABLE IF NOT EXISTS `" + credits +
                           "` (id BIGINT AUTO_INCREMENT PRIMARY KEY, trade_no VARCHAR(64) NOT "
                           "NULL, account VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, KEY "
                           "(trade_no)) ENGINE=InnoDB");

    const idem::ConsumerPolicy policy{.max_attempts = max_attempts,
                                      .first_delay = std::chrono::milliseconds{200},
                                      .max_delay = std::chrono::seconds{30},
                                      .store_outage = std::chrono::seconds{30}};
    idem::amqp::ConnectionParams amqp;
    amqp.host = broker.substr(0, colon);
    amqp.port = static_cast<std::uint16_t>(std::stoul(broker.substr(colon + 1)));
    idem::amqp::Consumer consumer(
        amqp, {.queue = queue, .prefetch = static_cast<std::uint16_t>(prefetch)});
    consumer.on_settled = [](const idem::amqp::Message& m, const idem::Ack& ack) {
      if (ack == idem::Ack::dead_letter) {
        std::fprintf(stderr, "dead-lettered delivery %llu: %s\n",
                     static_cast<unsigned long long>(m.delivery_tag), ack.reason.c_str());
      }
    };
    consumer.on_broker_error = [](const idem::amqp::BrokerError& e) {
      std::fprintf(stderr, "broker: %s; reconnecting\n", e.what());
    };
    running = &consumer;
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);

    consumer.run([&](const idem::amqp::Message& m) {
      const Payment p = parse(m);  // InvalidMessage: dead-lettered, nothing claimed
      // A database restart is waited out here, the message kept, instead of requeued at once.
      return idem::through_store_outage(policy, [&] {
        return idem::mysql::with_transaction(*pool, [&](idem::mysql::Connection& c) {
          auto tx = store.bind(c);
          return idem::consume(tx, idem::Key{"payment.credit", p.trade_no},
                               idem::fingerprint(m.body),
                               [&] {
                                 c.execute("INSERT INTO `" + credits +
                                               "` (trade_no, account, amount) VALUES (?, ?, ?)",
                                           {p.trade_no, p.account, p.amount});
                               },
                               {.consumer = &policy});
        });
      });
    });
    running = nullptr;
    const idem::amqp::ConsumerStats s = consumer.stats();
    std::printf("%s\n", nlohmann::json{{"delivered", s.delivered},
                                       {"redelivered", s.redelivered},
                                       {"committed", s.committed},
                                       {"retried", s.retried},
                                       {"dead_lettered", s.dead_lettered},
                                       {"handler_errors", s.handler_errors},
                                       {"reconnects", s.reconnects}}
                            .dump()
                            .c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_amqp_consumer: %s\n", e.what());
    return 1;
  }
}
