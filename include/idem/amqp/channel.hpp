#pragma once
// idem::amqp::Channel: one connection to a RabbitMQ broker with one channel on it, over
// rabbitmq-c, for a consumer: receive deliveries, settle them (ack, nack, reject), and the
// few declarations a service or its tests need. Not thread-safe: one thread uses a Channel.
//
//   idem::amqp::Channel channel({.host = "127.0.0.1", .port = 5672});
//   channel.qos(50);
//   channel.consume("payments");
//   while (auto m = channel.next(std::chrono::milliseconds{100})) { ...
//   channel.ack(m->delivery_tag); }
//
// A failure (the broker closed the channel or the connection, the socket failed) throws
// BrokerError and leaves the Channel broken: make a new one (Consumer does).

#if __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_tcp_socket.h>
#endif

#include <sys/time.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/amqp/connection_params.hpp"
#include "idem/amqp/errors.hpp"
#include "idem/amqp/message.hpp"
#include "idem/clock.hpp"

namespace idem::amqp {

// A queue as declare_queue() creates it. The queue's arguments are the broker's (x-...).
struct QueueParams {
  bool durable = true;
  // Where rejected messages go (basic.reject without requeue): the queue's dead-letter
  // exchange and, if set, the routing key they get there.
  std::string dead_letter_exchange{};
  std::string dead_letter_routing_key{};
  bool quorum = false;  // x-queue-type = quorum (durable, replicated)
  // Quorum queues: deliveries after which the broker dead-letters a message (0: none).
  std::uint32_t delivery_limit = 0;
};

namespace detail {

inline amqp_bytes_t bytes(std::string_view s) noexcept {
  return amqp_bytes_t{s.size(), const_cast<char*>(s.data())};
}

inline std::string text(amqp_bytes_t b) {
  return b.len == 0 ? std::string() : std::string(static_cast<const char*>(b.bytes), b.len);
}

inline timeval to_timeval(Duration d) noexcept {
  const auto ms = d.count() < 0 ? 0 : d.count();
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

// A header's value as text, for the kinds a consumer reads (text and integers).
inline std::optional<std::string> header_text(const amqp_field_value_t& v) {
  switch (v.kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
      return text(v.value.bytes);
    case AMQP_FIELD_KIND_I8:
      return std::to_string(v.value.i8);
    case AMQP_FIELD_KIND_U8:
      return std::to_string(v.value.u8);
    case AMQP_FIELD_KIND_I16:
      return std::to_string(v.value.i16);
    case AMQP_FIELD_KIND_U16:
      return std::to_string(v.value.u16);
    case AMQP_FIELD_KIND_I32:
      return std::to_string(v.value.i32);
    case AMQP_FIELD_KIND_U32:
      return std::to_string(v.value.u32);
    case AMQP_FIELD_KIND_I64:
      return std::to_string(v.value.i64);
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
      return std::to_string(v.value.u64);
    default:
      return std::nullopt;
  }
}

}  // namespace detail

class Channel {
 public:
  static constexpr amqp_channel_t number = 1;

  explicit Channel(const ConnectionParams& params) : conn_(amqp_new_connection()) {
    if (conn_ == nullptr) throw BrokerError("idem::amqp: out of memory for a connection");
    try {
      open(params);
    } catch (...) {
      amqp_destroy_connection(conn_);
      throw;
    }
  }
  ~Channel() {
    if (!broken_) {
      amqp_channel_close(conn_, number, AMQP_REPLY_SUCCESS);
      amqp_connection_close(conn_, AMQP_REPLY_SUCCESS);
    }
    amqp_destroy_connection(conn_);
  }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Deliveries the broker sends before the earlier ones are settled.
  void qos(std::uint16_t prefetch) {
    amqp_basic_qos(conn_, number, 0, prefetch, false);
    check_reply("basic.qos");
  }

  // Starts consuming `queue` (manual acknowledgements); returns the consumer tag.
  std::string consume(std::string_view queue) {
    const amqp_basic_consume_ok_t* ok =
        amqp_basic_consume(conn_, number, detail::bytes(queue), amqp_empty_bytes, false, false,
                           false, amqp_empty_table);
    check_reply(fmt::format("basic.consume on queue '{}'", queue));
    return detail::text(ok->consumer_tag);
  }

  // The next delivery, or none within `timeout`. Throws BrokerError when the broker closed
  // the channel or the connection (a deleted queue cancels the consumer: also an error).
  std::optional<Message> next(Duration timeout) {
    amqp_maybe_release_buffers(conn_);
    amqp_envelope_t envelope;
    timeval tv = detail::to_timeval(timeout);
    const amqp_rpc_reply_t r = amqp_consume_message(conn_, &envelope, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
      Message m = message_of(envelope);
      amqp_destroy_envelope(&envelope);
      return m;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
      if (r.library_error == AMQP_STATUS_TIMEOUT) return std::nullopt;
      if (r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
        other_frame();
        return std::nullopt;
      }
    }
    fail(r, "waiting for a delivery");
  }

  void ack(std::uint64_t tag, bool multiple = false) {
    check_status(amqp_basic_ack(conn_, number, tag, multiple), "basic.ack");
  }
  void nack(std::uint64_t tag, bool requeue) {
    check_status(amqp_basic_nack(conn_, number, tag, false, requeue), "basic.nack");
  }
  void reject(std::uint64_t tag, bool requeue) {
    check_status(amqp_basic_reject(conn_, number, tag, requeue), "basic.reject");
  }

  // Publisher confirms on this channel (confirm.select): publish() then returns once the
  // broker has taken the message (persisted, for a durable queue), and throws BrokerError when
  // it refused it. For a producer's channel: deliveries are not expected there.
  void confirm_publishes() {
    amqp_confirm_select(conn_, number);
    check_reply("confirm.select");
    confirming_ = true;
  }

  // Publishes a persistent message (for producers and tests).
  void publish(std::string_view exchange, std::string_view routing_key, std::string_view body,
               std::string_view message_id = {}) {
    amqp_basic_properties_t props{};
    props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
    props.delivery_mode = 2;
    if (!message_id.empty()) {
      props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
      props.message_id = detail::bytes(message_id);
    }
    check_status(
        amqp_basic_publish(conn_, number, detail::bytes(exchange), detail::bytes(routing_key),
                           false, false, &props, detail::bytes(body)),
        "basic.publish");
    if (confirming_) wait_for_confirm();
  }

  // Declares `name` (idempotent when the arguments match); returns its ready messages.
  std::uint32_t declare_queue(std::string_view name, const QueueParams& q = {}) {
    std::vector<amqp_table_entry_t> args;
    auto add_text = [&](const char* key, const std::string& value) {
      amqp_table_entry_t e{};
      e.key = amqp_cstring_bytes(key);
      e.value.kind = AMQP_FIELD_KIND_UTF8;
      e.value.value.bytes = detail::bytes(value);
      args.push_back(e);
    };
    const std::string quorum = "quorum";
    if (!q.dead_letter_exchange.empty()) add_text("x-dead-letter-exchange", q.dead_letter_exchange);
    if (!q.dead_letter_routing_key.empty()) {
      add_text("x-dead-letter-routing-key", q.dead_letter_routing_key);
    }
    if (q.quorum) add_text("x-queue-type", quorum);
    if (q.delivery_limit != 0) {
      amqp_table_entry_t e{};
      e.key = amqp_cstring_bytes("x-delivery-limit");
      e.value.kind = AMQP_FIELD_KIND_I64;
      e.value.value.i64 = q.delivery_limit;
      args.push_back(e);
    }
    const amqp_table_t table{static_cast<int>(args.size()), args.data()};
    const amqp_queue_declare_ok_t* ok = amqp_queue_declare(conn_, number, detail::bytes(name),
                                                           false, q.durable, false, false, table);
    check_reply(fmt::format("queue.declare '{}'", name));
    return ok->message_count;
  }
  void declare_exchange(std::string_view name, std::string_view type = "fanout") {
    amqp_exchange_declare(conn_, number, detail::bytes(name), detail::bytes(type), false, true,
                          false, false, amqp_empty_table);
    check_reply(fmt::format("exchange.declare '{}'", name));
  }
  void bind_queue(std::string_view queue, std::string_view exchange,
                  std::string_view routing_key = {}) {
    amqp_queue_bind(conn_, number, detail::bytes(queue), detail::bytes(exchange),
                    detail::bytes(routing_key), amqp_empty_table);
    check_reply(fmt::format("queue.bind '{}' to '{}'", queue, exchange));
  }
  void delete_queue(std::string_view name) {
    amqp_queue_delete(conn_, number, detail::bytes(name), false, false);
    check_reply(fmt::format("queue.delete '{}'", name));
  }

  // Whether a frame (a delivery, say) has arrived that next() has not taken yet.
  bool buffered() const noexcept {
    return amqp_data_in_buffer(conn_) != 0 || amqp_frames_enqueued(conn_) != 0;
  }

  bool broken() const noexcept { return broken_; }
  amqp_connection_state_t native() const noexcept { return conn_; }

 private:
  void open(const ConnectionParams& p) {
    amqp_socket_t* socket = amqp_tcp_socket_new(conn_);
    if (socket == nullptr) throw BrokerError("idem::amqp: cannot create a socket");
    timeval tv = detail::to_timeval(p.timeout);
    if (const int s = amqp_socket_open_noblock(socket, p.host.c_str(), p.port, &tv);
        s != AMQP_STATUS_OK) {
      broken_ = true;
      throw BrokerError(fmt::format("idem::amqp: cannot connect to {}:{}: {}", p.host, p.port,
                                    amqp_error_string2(s)));
    }
    timeout_ = detail::to_timeval(p.timeout);
    amqp_set_rpc_timeout(conn_, &tv);
    const amqp_rpc_reply_t login = amqp_login(
        conn_, p.vhost.c_str(), 0, AMQP_DEFAULT_FRAME_SIZE, static_cast<int>(p.heartbeat.count()),
        AMQP_SASL_METHOD_PLAIN, p.user.c_str(), p.password.c_str());
    if (login.reply_type != AMQP_RESPONSE_NORMAL) {
      fail(login,
           fmt::format("logging in to {}:{} vhost '{}' as '{}'", p.host, p.port, p.vhost, p.user));
    }
    amqp_channel_open(conn_, number);
    check_reply("channel.open");
  }

  // The broker's basic.ack (or basic.nack) of the message just published.
  void wait_for_confirm() {
    for (;;) {
      amqp_frame_t frame;
      timeval tv = timeout_;
      if (const int s = amqp_simple_wait_frame_noblock(conn_, &frame, &tv); s != AMQP_STATUS_OK) {
        broken_ = true;
        throw BrokerError(
            fmt::format("idem::amqp: waiting for a publisher confirm: {}", amqp_error_string2(s)));
      }
      if (frame.frame_type != AMQP_FRAME_METHOD) continue;
      switch (frame.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD:
          return;
        case AMQP_BASIC_NACK_METHOD:
          throw BrokerError("idem::amqp: the broker refused a published message (basic.nack)");
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD:
        case AMQP_BASIC_RETURN_METHOD:  // unroutable: never confirmed as taken
          closed_by_broker("waiting for a publisher confirm", frame.payload.method.id,
                           frame.payload.method.decoded);
        default:
          break;
      }
    }
  }

  Message message_of(const amqp_envelope_t& e) {
    Message m;
    m.delivery_tag = e.delivery_tag;
    m.redelivered = e.redelivered != 0;
    m.exchange = detail::text(e.exchange);
    m.routing_key = detail::text(e.routing_key);
    m.body = detail::text(e.message.body);
    const amqp_basic_properties_t& p = e.message.properties;
    if ((p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) m.message_id = detail::text(p.message_id);
    if ((p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG) != 0) {
      m.content_type = detail::text(p.content_type);
    }
    if ((p._flags & AMQP_BASIC_HEADERS_FLAG) != 0) {
      for (int i = 0; i < p.headers.num_entries; ++i) {
        const amqp_table_entry_t& h = p.headers.entries[i];
        if (auto v = detail::header_text(h.value)) m.headers.emplace_back(detail::text(h.key), *v);
      }
    }
    return m;
  }

  // A frame other than a delivery arrived where a delivery was awaited: a broker's close, a
  // consumer cancelled by the broker, or a returned message (read and dropped).
  void other_frame() {
    amqp_frame_t frame;
    if (const int s = amqp_simple_wait_frame(conn_, &frame); s != AMQP_STATUS_OK) {
      broken_ = true;
      throw BrokerError(fmt::format("idem::amqp: reading a frame: {}", amqp_error_string2(s)));
    }
    if (frame.frame_type != AMQP_FRAME_METHOD) return;
    switch (frame.payload.method.id) {
      case AMQP_CHANNEL_CLOSE_METHOD:
      case AMQP_CONNECTION_CLOSE_METHOD:
        closed_by_broker("waiting for a delivery", frame.payload.method.id,
                         frame.payload.method.decoded);
      case AMQP_BASIC_CANCEL_METHOD:
        broken_ = true;
        throw BrokerError("idem::amqp: the broker cancelled the consumer (queue deleted?)");
      case AMQP_BASIC_RETURN_METHOD: {
        amqp_message_t returned;
        const amqp_rpc_reply_t r = amqp_read_message(conn_, frame.channel, &returned, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) fail(r, "reading a returned message");
        amqp_destroy_message(&returned);
        return;
      }
      default:
        return;
    }
  }

  void check_status(int status, std::string_view what) {
    if (status == AMQP_STATUS_OK) return;
    broken_ = true;
    throw BrokerError(fmt::format("idem::amqp: {}: {}", what, amqp_error_string2(status)));
  }

  void check_reply(std::string_view what) {
    const amqp_rpc_reply_t r = amqp_get_rpc_reply(conn_);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) fail(r, what);
  }

  // The broker's channel.close or connection.close (`id`, decoded), or another method where
  // none was expected.
  [[noreturn]] void closed_by_broker(std::string_view what, amqp_method_number_t id,
                                     const void* decoded) {
    broken_ = true;
    if (id == AMQP_CHANNEL_CLOSE_METHOD) {
      const auto* close = static_cast<const amqp_channel_close_t*>(decoded);
      throw BrokerError(fmt::format("idem::amqp: {}: the broker closed the channel: {} {}", what,
                                    close->reply_code, detail::text(close->reply_text)),
                        close->reply_code);
    }
    if (id == AMQP_CONNECTION_CLOSE_METHOD) {
      const auto* close = static_cast<const amqp_connection_close_t*>(decoded);
      throw BrokerError(fmt::format("idem::amqp: {}: the broker closed the connection: {} {}", what,
                                    close->reply_code, detail::text(close->reply_text)),
                        close->reply_code);
    }
    throw BrokerError(fmt::format("idem::amqp: {}: the broker answered method {:#x}", what, id));
  }

  [[noreturn]] void fail(const amqp_rpc_reply_t& r, std::string_view what) {
    broken_ = true;
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION) {
      closed_by_broker(what, r.reply.id, r.reply.decoded);
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
      throw BrokerError(
          fmt::format("idem::amqp: {}: {}", what, amqp_error_string2(r.library_error)));
    }
    throw BrokerError(fmt::format("idem::amqp: {}: no reply", what));
  }

  amqp_connection_state_t conn_;
  timeval timeout_{};
  bool broken_ = false;
  bool confirming_ = false;
};

}  // namespace idem::amqp
