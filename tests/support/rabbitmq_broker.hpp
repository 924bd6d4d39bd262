#pragma once
// The RabbitMQ broker that the CTest fixture 'rabbitmq.start' started (scripts/rabbitmq, its
// directory in IDEM_RABBITMQ_DIR), and queues no other test uses.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <unistd.h>

#include <idem/amqp.hpp>

#include "paths.hpp"

namespace idem_test {

inline std::string rabbitmq_dir() {
  const char* dir = std::getenv("IDEM_RABBITMQ_DIR");
  if (dir == nullptr || *dir == '\0') {
    throw std::runtime_error(
        "IDEM_RABBITMQ_DIR is not set: the RabbitMQ tests run against the broker that the "
        "CTest fixture rabbitmq.start launches (run them through ctest)");
  }
  return dir;
}

inline idem::amqp::ConnectionParams broker() {
  std::ifstream in(rabbitmq_dir() + "/port");
  int port = 0;
  if (!(in >> port)) throw std::runtime_error("no broker in " + rabbitmq_dir() + " (no port file)");
  idem::amqp::ConnectionParams p;
  p.port = static_cast<std::uint16_t>(port);
  p.heartbeat = std::chrono::seconds{5};
  return p;
}

// A queue name of this test's own.
inline std::string unique_queue(const std::string& stem) {
  static std::atomic<int> n{0};
  return "idem-test-" + stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

// Runs rabbitmqctl against the test broker (e.g. "close_all_connections test"); throws when it
// fails.
inline void broker_ctl(const std::string& args) {
  const std::string cmd = std::string(paths::source_dir) + "/scripts/rabbitmq ctl " +
                          rabbitmq_dir() + " " + args + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
}

// Waits until done() or the deadline; true when done.
template <class Done>
bool eventually(Done&& done, std::chrono::seconds deadline = std::chrono::seconds{60}) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return true;
}

// A work queue whose rejected messages go to a dead-letter queue, both new.
struct WorkQueue {
  std::string name = unique_queue("work");
  std::string dead_letters = name + ".dlq";
  std::string exchange = name + ".dlx";
  idem::amqp::QueueParams params;

  explicit WorkQueue(idem::amqp::QueueParams p = {}) : params(std::move(p)) {
    idem::amqp::Channel c(broker());
    c.declare_exchange(exchange, "fanout");
    c.declare_queue(dead_letters);
    c.bind_queue(dead_letters, exchange);
    params.dead_letter_exchange = exchange;
    c.declare_queue(name, params);
  }
  ~WorkQueue() {
    try {
      idem::amqp::Channel c(broker());
      c.delete_queue(name);
      c.delete_queue(dead_letters);
    } catch (...) {
    }
  }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void publish(const std::string& body, const std::string& message_id = {}) const {
    idem::amqp::Channel c(broker());
    c.publish("", name, body, message_id);
  }
  // Messages ready in the work queue, and in its dead-letter queue (a queue.declare with the
  // same arguments answers them).
  std::uint32_t ready() const {
    idem::amqp::Channel c(broker());
    return c.declare_queue(name, params);
  }
  std::uint32_t dead_lettered() const {
    idem::amqp::Channel c(broker());
    return c.declare_queue(dead_letters);
  }
};

}  // namespace idem_test
