#pragma once
// idem::amqp::ConnectionParams: where a RabbitMQ broker is and how to log in.

#include <chrono>
#include <cstdint>
#include <string>

#include "idem/clock.hpp"

namespace idem::amqp {

struct ConnectionParams {
  std::string host = "127.0.0.1";
  std::uint16_t port = 5672;
  std::string vhost = "/";
  std::string user = "guest";
  std::string password = "guest";
  // Heartbeats the broker and the client exchange, so that a dead peer is noticed; a
  // consumer's handler must return within about twice this (0: none).
  std::chrono::seconds heartbeat{30};
  // How long opening the socket, and each request to the broker, may take.
  Duration timeout = std::chrono::seconds{10};
};

}  // namespace idem::amqp
