// amqp.consume: idem::amqp::Consumer consuming payments from a local RabbitMQ queue, each
// credited in MariaDB through idem::consume bound to its transaction, against a hand-written
// rabbitmq-c consumer doing the same dedup (a dedup row INSERTed in the business transaction,
// a duplicate rolled back) and acknowledging each message after its COMMIT. 12% duplicates,
// the same consumers, prefetch and messages on both sides, in the same run.
#include "scenarios.hpp"

#ifdef IDEM_BENCH_AMQP

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/amqp.hpp>

#include "mysql/shared.hpp"

namespace bench {
namespace {

using mysql_bench::Kind;

constexpr int consumers = 4;
constexpr std::uint16_t prefetch = 50;

idem::amqp::ConnectionParams broker_of(const Config& config) {
  const auto colon = config.amqp.rfind(':');
  idem::amqp::ConnectionParams p;
  p.host = config.amqp.substr(0, colon);
  p.port = static_cast<std::uint16_t>(std::stoul(config.amqp.substr(colon + 1)));
  return p;
}

std::string credit_ddl(const std::string& table) {
  return fmt::format(
      "CREATE TABLE IF NOT EXISTS {} (id BIGINT AUTO_INCREMENT PRIMARY KEY, trade_no "
      "VARBINARY(64) NOT NULL, amount BIGINT NOT NULL) ENGINE=InnoDB",
      table);
}

std::string trade_of(const std::string& body) {
  return nlohmann::json::parse(body).at("trade_no").get<std::string>();
}

// A fresh queue holding the round's messages, published before the clock starts.
void fill(const idem::amqp::ConnectionParams& broker, const std::string& queue, int round,
          std::size_t messages) {
  idem::amqp::Channel c(broker);
  c.declare_queue(queue, {.durable = false});
  c.delete_queue(queue);
  c.declare_queue(queue, {.durable = false});
  c.confirm_publishes();
  for (std::size_t i = 0; i < messages; ++i) {
    c.publish("", queue,
              nlohmann::json{{"trade_no", mix_key_id(round, 0, i)}, {"amount", 100}}.dump());
  }
}

// The hand-written consumer: rabbitmq-c and the MySQL C API, one thread.
void handwritten(const idem::amqp::ConnectionParams& broker, const std::string& queue, RawConn& db,
                 std::atomic<std::size_t>& done, std::size_t total) {
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t* socket = amqp_tcp_socket_new(conn);
  if (amqp_socket_open(socket, broker.host.c_str(), broker.port) != AMQP_STATUS_OK) {
    throw std::runtime_error("handwritten: cannot connect to the broker");
  }
  if (amqp_login(conn, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 30, AMQP_SASL_METHOD_PLAIN, "guest",
                 "guest")
          .reply_type != AMQP_RESPONSE_NORMAL) {
    throw std::runtime_error("handwritten: login failed");
  }
  amqp_channel_open(conn, 1);
  amqp_basic_qos(conn, 1, 0, prefetch, false);
  amqp_basic_consume(conn, 1, amqp_cstring_bytes(queue.c_str()), amqp_empty_bytes, false, false,
                     false, amqp_empty_table);
  if (amqp_get_rpc_reply(conn).reply_type != AMQP_RESPONSE_NORMAL) {
    throw std::runtime_error("handwritten: basic.consume failed");
  }
  RawStmt dedup(db, "INSERT INTO bench_amqp_dedup (trade_no) VALUES (?)", {Kind::text});
  RawStmt credit(db, "INSERT INTO bench_amqp_credit_raw (trade_no, amount) VALUES (?, ?)",
                 {Kind::text, Kind::int64});
  while (done.load() < total) {
    amqp_maybe_release_buffers(conn);
    amqp_envelope_t envelope;
    timeval tv{0, 100'000};
    const amqp_rpc_reply_t r = amqp_consume_message(conn, &envelope, &tv, 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
      if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
          r.library_error == AMQP_STATUS_TIMEOUT) {
        continue;
      }
      throw std::runtime_error("handwritten: the delivery failed");
    }
    const std::string body(static_cast<const char*>(envelope.message.body.bytes),
                           envelope.message.body.len);
    const std::string trade = trade_of(body);
    for (int attempt = 1;; ++attempt) {
      try {
        db.query("START TRANSACTION");
        dedup[0].str = trade;
        if (dedup.execute(true) < 0) {
          db.query("ROLLBACK");  // a duplicate: done before
        } else {
          credit[0].str = trade;
          credit[1].num = 100;
          credit.execute();
          db.query("COMMIT");
        }
        break;
      } catch (const std::exception&) {
        const unsigned code = mysql_errno(db.native());
        db.query("ROLLBACK");
        if ((code != er_lock_deadlock && code != 1205) || attempt == 8) throw;
      }
    }
    amqp_basic_ack(conn, 1, envelope.delivery_tag, false);
    amqp_destroy_envelope(&envelope);
    ++done;
  }
  amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
}

void amqp_consume(const Config& config) {
  const std::string name = "amqp.consume";
  const auto broker = broker_of(config);
  const std::size_t total = config.ops(20'000, 4'000);
  mysql_bench::Server server(config, consumers);
  for (const char* t : {"bench_amqp_credit_lib", "bench_amqp_credit_raw"})
    server.conn(0).query(credit_ddl(t));
  server.conn(0).query(
      "CREATE TABLE IF NOT EXISTS bench_amqp_dedup (trade_no VARBINARY(64) NOT NULL PRIMARY "
      "KEY) ENGINE=InnoDB");
  const idem::ConsumerPolicy policy{.max_attempts = 5};
  const std::string lib_queue = "bench-amqp-library", raw_queue = "bench-amqp-baseline";

  std::vector<std::unique_ptr<idem::amqp::Consumer>> library_consumers;
  std::atomic<std::size_t> lib_done{0}, raw_done{0};
  std::atomic<long> lib_runs{0};
  Side library{
      [&](int r) {
        server.truncate(mysql_bench::lib_table);
        server.truncate("bench_amqp_credit_lib");
        fill(broker, lib_queue, r, total);
        lib_done = 0;
        library_consumers.clear();
        for (int t = 0; t < consumers; ++t) {
          auto c = std::make_unique<idem::amqp::Consumer>(
              broker, idem::amqp::ConsumerParams{.queue = lib_queue, .prefetch = prefetch});
          c->on_settled = [&](const idem::amqp::Message&, const idem::Ack&) {
            if (++lib_done >= total) {
              for (auto& each : library_consumers)
                each->stop();
            }
          };
          library_consumers.push_back(std::move(c));
        }
      },
      [&](int t, int) {
        const std::string credit =
            "INSERT INTO bench_amqp_credit_lib (trade_no, amount) VALUES (?, ?)";
        library_consumers[static_cast<std::size_t>(t)]->run([&](const idem::amqp::Message& m) {
          const std::string trade = trade_of(m.body);
          return idem::mysql::with_transaction(*server.pool, [&](idem::mysql::Connection& c) {
            auto tx = server.store->bind(c);
            return idem::consume(tx, idem::Key{"payment.credit", trade}, idem::fingerprint(m.body),
                                 [&] {
                                   ++lib_runs;
                                   c.execute(credit, {trade, 100});
                                 },
                                 {.consumer = &policy});
          });
        });
      }};
  Side baseline{
      [&](int r) {
        server.truncate("bench_amqp_dedup");
        server.truncate("bench_amqp_credit_raw");
        fill(broker, raw_queue, r, total);
        raw_done = 0;
      },
      [&](int t, int) { handwritten(broker, raw_queue, server.conn(t), raw_done, total); }};
  const auto t = alternate(name, config.rounds_per_side(), consumers, total, library, baseline);
  // Both sides credited each payment once.
  const auto count = [&](const std::string& sql) {
    return server.pool->acquire()->select(sql, {}).at(0).at(0).integer().value();
  };
  for (const char* table : {"bench_amqp_credit_lib", "bench_amqp_credit_raw"}) {
    if (count(fmt::format("SELECT COUNT(*) FROM {}", table)) !=
        count(fmt::format("SELECT COUNT(DISTINCT trade_no) FROM {}", table))) {
      throw std::runtime_error(fmt::format("amqp.consume: {} credited a payment twice", table));
    }
  }
  auto j = throughput_json(name, consumers, total, t, ">= 0.9");
  j["consumers"] = consumers;
  j["prefetch"] = prefetch;
  j["duplicates"] = "12%";
  j["library"] =
      "idem::amqp::Consumer, consume bound in with_transaction on MariaDB (record_last), "
      "acks batched";
  j["baseline"] =
      "hand-written rabbitmq-c consumer: START TRANSACTION, INSERT dedup row (duplicate: "
      "ROLLBACK), INSERT credit, COMMIT, basic.ack";
  {
    idem::amqp::Channel c(broker);
    c.delete_queue(lib_queue);
    c.delete_queue(raw_queue);
  }
  emit(j);
}

}  // namespace

int run_amqp(const Config& config, const Selected& selected) {
  if (!selected("amqp.consume")) return 0;
  if (config.amqp.empty() || config.socket.empty()) {
    progress("amqp.consume: skipped, needs --amqp HOST:PORT and --socket");
    return 1;
  }
  return attempt("amqp.consume", [&] { amqp_consume(config); });
}

}  // namespace bench

#else

namespace bench {

int run_amqp(const Config&, const Selected& selected) {
  if (!selected("amqp.consume")) return 0;
  progress("amqp.consume: idem-bench was built without idem::amqp (rabbitmq-c)");
  return 1;
}

}  // namespace bench

#endif
