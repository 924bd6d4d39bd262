#pragma once
// idem::amqp::Message: one delivery from a queue, as a Consumer hands it to its handler.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem::amqp {

struct Message {
  std::uint64_t delivery_tag = 0;
  // The broker delivered it before (to this consumer or another) without an acknowledgement.
  // Not a reason to skip it: the record decides (replay, or run again).
  bool redelivered = false;
  std::string exchange{};
  std::string routing_key{};
  std::string body{};
  std::string message_id{};  // the producer's, if it set one: never the idempotency key
  std::string content_type{};
  // The headers whose values are text or integers (an integer as its decimal text), in the
  // order the producer sent them; e.g. x-delivery-count on a quorum queue.
  std::vector<std::pair<std::string, std::string>> headers{};

  std::optional<std::string_view> header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return std::string_view(v);
    }
    return std::nullopt;
  }
};

}  // namespace idem::amqp
