#pragma once
// One pipelined connection to one Redis server, driven by an Asio executor and shared by every
// coroutine that uses it: the wire under idem::redis::AsyncConnection, which routes over one
// link (a single server) or one per cluster node, as detail::Link is under the blocking
// Connection. Each caller's command is appended to what goes out next, the writes of many
// callers leave in one send, and the replies come back in order, each to its caller.
//
// - Opening connects (TCP, or the unix socket) within connect_timeout, then sends AUTH,
//   SELECT and CLIENT SETNAME as the parameters ask, and reads the server's id of the
//   connection (CLIENT ID). A refused AUTH or SELECT is a StoreError that is not retryable.
// - A command waits for its reply; it cannot be cancelled (a reply to a command already sent
//   must still be read, and idem's scripts are short).
// - A reply later than read_timeout, a broken socket or a reply that cannot be parsed breaks
//   the link: every command waiting fails with a retryable StoreError whose diagnostics say
//   the reply was lost (it may have run), and so does every later command.
// - It lives on a strand of the executor it was opened on, which must be running while it is
//   used; callers resume on their own executors.

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/system_error.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/async/net.hpp"
#include "idem/errors.hpp"
#include "idem/redis/connection_params.hpp"
#include "idem/redis/detail/link.hpp"
#include "idem/redis/detail/script.hpp"
#include "idem/redis/errors.hpp"
#include "idem/redis/reply.hpp"

namespace idem::redis::detail {

namespace net = async::net;

// Opening a link found no server listening at its address (ECONNREFUSED): no process there
// holds a connection of ours, so nothing sent on an earlier one can still run there.
class ConnectionRefused : public StoreError {
 public:
  explicit ConnectionRefused(StoreError e) : StoreError(std::move(e)) {}
};

class AsyncLink : public std::enable_shared_from_this<AsyncLink> {
  struct Private {};

 public:
  // A command: its arguments, the name first.
  using Command = std::span<const std::string_view>;

  // Opens a link to `address` that lives on `executor` (on a strand of it). Throws StoreError.
  static net::awaitable<std::shared_ptr<AsyncLink>> open(net::any_io_executor executor,
                                                         const ConnectionParams& params,
                                                         Address address) {
    auto c = std::make_shared<AsyncLink>(Private{}, executor, params, std::move(address));
    co_await c->connect();
    co_return c;
  }

  AsyncLink(Private, const net::any_io_executor& executor, const ConnectionParams& params,
            Address address)
      : params_(params),
        address_(std::move(address)),
        strand_(net::make_strand(executor)),
        socket_(strand_),
        watchdog_(strand_),
        reader_(redisReaderCreate()) {
    if (reader_ == nullptr) {
      throw StoreError("idem::redis: cannot allocate a reply reader", true,
                       Diagnostics{code::oom, "", "out of memory", false});
    }
  }
  ~AsyncLink() {
    if (reader_ != nullptr) redisReaderFree(reader_);
  }
  AsyncLink(const AsyncLink&) = delete;
  AsyncLink& operator=(const AsyncLink&) = delete;

  // One command's reply, an error reply included (checked() turns it into a StoreError).
  net::awaitable<Reply> command(Command args) {
    std::vector<Reply> replies = co_await send(std::span<const Command>(&args, 1));
    co_return std::move(replies.front());
  }
  // The commands, pipelined: written together, their replies in the same order.
  net::awaitable<std::vector<Reply>> commands(std::span<const Command> list) {
    co_return co_await send(list);
  }

  // The reply, or its error as a StoreError with the server's text.
  Reply checked(Reply r) const {
    if (r.is_error()) throw server_error(where(), r.text());
    return r;
  }

  // Runs a script by its SHA1, and by its source when the server does not know it yet; the
  // reply checked.
  net::awaitable<Reply> eval(const Script& script, const ScriptCall& call) {
    std::vector<std::string_view> args = script_args(script, call);
    Reply r = co_await command(Command(args));
    if (unknown_script(r)) {
      send_source(script, args);
      r = co_await command(Command(args));
    }
    co_return checked(std::move(r));
  }

  // The script once per call, pipelined; the replies checked, in the calls' order (an error
  // reply throws once every reply has arrived).
  net::awaitable<std::vector<Reply>> eval_all(const Script& script,
                                              std::span<const ScriptCall> calls) {
    std::vector<std::vector<std::string_view>> args;
    args.reserve(calls.size());
    for (const ScriptCall& call : calls)
      args.push_back(script_args(script, call));
    std::vector<Command> list(args.begin(), args.end());
    std::vector<Reply> replies = co_await send(list);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (unknown_script(replies[i])) {
        replies[i] = co_await eval(script, calls[i]);
      } else {
        replies[i] = checked(std::move(replies[i]));
      }
    }
    co_return replies;
  }

  // Breaks the connection: every command waiting fails, as after a lost socket.
  void close() {
    net::dispatch(strand_, [self = shared_from_this()] {
      self->fail(self->client_error(code::other, "the connection was closed"));
    });
  }

  bool broken() const noexcept { return broken_flag_.load(std::memory_order_acquire); }
  // Broken while commands were out on it: their replies were lost, and they may still run.
  bool lost_replies() const noexcept { return lost_replies_.load(std::memory_order_acquire); }
  // The server's id of this connection (CLIENT ID), unique on the server and never 0.
  unsigned long id() const noexcept { return id_; }
  std::string where() const { return address_.text(); }
  const Address& address() const noexcept { return address_; }
  const ConnectionParams& params() const noexcept { return params_; }

 private:
  using Handler = net::any_completion_handler<void(std::exception_ptr, std::vector<Reply>)>;
  struct Waiting {
    std::size_t count;  // replies it waits for
    std::vector<Reply> replies;
    Handler handler;
    std::chrono::steady_clock::time_point sent;
  };
  using Clock = std::chrono::steady_clock;

  net::awaitable<std::vector<Reply>> send(std::span<const Command> list) {
    // The caller's frame holds the arguments until the replies come: they are written to the
    // outgoing buffer on the strand, without a copy in between. (The initiation is named
    // apart from the co_await: GCC 12 destroys a capturing lambda written inside one twice.)
    auto initiate = [self = shared_from_this(), list](auto handler) {
      net::dispatch(self->strand_, [self, list, h = Handler(std::move(handler))]() mutable {
        self->enqueue(list, std::move(h));
      });
    };
    co_return co_await net::async_initiate<decltype(net::use_awaitable),
                                           void(std::exception_ptr, std::vector<Reply>)>(
        std::move(initiate), net::use_awaitable);
  }

  // On the strand.
  void enqueue(std::span<const Command> list, Handler handler) {
    if (broken_) {
      complete(std::move(handler), std::make_exception_ptr(*broken_), {});
      return;
    }
    if (list.empty()) {  // no reply will come for nothing
      complete(std::move(handler), nullptr, {});
      return;
    }
    for (const Command& args : list)
      append(args);
    waiting_.push_back(Waiting{list.size(), {}, std::move(handler), Clock::now()});
    waiting_.back().replies.reserve(list.size());
    write_more();
    read_more();
    watch();
  }

  // RESP: *<n>\r\n then $<len>\r\n<bytes>\r\n per argument.
  void append(Command args) {
    out_ += '*';
    out_ += fmt::format_int(args.size()).c_str();
    out_ += "\r\n";
    for (const std::string_view a : args) {
      out_ += '$';
      out_ += fmt::format_int(a.size()).c_str();
      out_ += "\r\n";
      out_.append(a.data(), a.size());
      out_ += "\r\n";
    }
  }

  void write_more() {
    if (writing_now_ || out_.empty() || broken_) return;
    writing_now_ = true;
    std::swap(out_, writing_);
    net::async_write(
        socket_, net::buffer(writing_),
        net::bind_executor(
            strand_, [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
              self->writing_now_ = false;
              self->writing_.clear();
              if (ec) {
                self->fail(self->lost(ec));
              } else {
                self->write_more();
              }
            }));
  }

  // The socket is read, and the oldest command watched, only while commands wait for replies:
  // an idle connection leaves no work on the loop (io_context::run() returns).
  void read_more() {
    if (reading_now_ || waiting_.empty() || broken_) return;
    reading_now_ = true;
    socket_.async_read_some(
        net::buffer(in_),
        net::bind_executor(strand_, [self = shared_from_this()](const boost::system::error_code& ec,
                                                                std::size_t n) {
          self->reading_now_ = false;
          self->on_read(ec, n);
        }));
  }

  void on_read(const boost::system::error_code& ec, std::size_t n) {
    if (broken_) return;
    if (ec) {
      fail(lost(ec));
      return;
    }
    if (redisReaderFeed(reader_, in_.data(), n) != REDIS_OK) {
      fail(client_error(code::protocol, "a reply could not be parsed"));
      return;
    }
    std::vector<std::pair<Handler, std::vector<Reply>>> done;
    for (;;) {
      void* r = nullptr;
      if (redisReaderGetReply(reader_, &r) != REDIS_OK) {
        fail(client_error(code::protocol, "a reply could not be parsed"));
        break;
      }
      if (r == nullptr) break;
      Reply reply(static_cast<redisReply*>(r));
      if (waiting_.empty()) {
        fail(client_error(code::protocol, "the server sent a reply nobody asked for"));
        break;
      }
      Waiting& w = waiting_.front();
      w.replies.push_back(std::move(reply));
      if (w.replies.size() == w.count) {
        done.emplace_back(std::move(w.handler), std::move(w.replies));
        waiting_.pop_front();
      }
    }
    if (!done.empty()) watchdog_.cancel();  // it watches the new oldest, or nothing
    read_more();
    // Completed last: a caller resumed here may send its next command at once.
    for (auto& [handler, replies] : done)
      complete(std::move(handler), nullptr, std::move(replies));
  }

  // Breaks the connection when its oldest command has waited read_timeout.
  void watch() {
    if (watching_ || waiting_.empty() || broken_) return;
    watching_ = true;
    watchdog_.expires_at(waiting_.front().sent + params_.read_timeout);
    watchdog_.async_wait(net::bind_executor(strand_, [self = shared_from_this()](
                                                         const boost::system::error_code&) {
      self->watching_ = false;
      if (self->broken_) return;
      const auto timeout = self->params_.read_timeout;
      if (!self->waiting_.empty() && Clock::now() - self->waiting_.front().sent >= timeout) {
        self->fail(self->client_error(
            code::io, fmt::format("no reply within the read timeout of {} ms", timeout.count())));
        return;
      }
      self->watch();
    }));
  }

  static void complete(Handler handler, std::exception_ptr error, std::vector<Reply> replies) {
    auto executor = net::get_associated_executor(handler);
    net::dispatch(executor, [h = std::move(handler), error, r = std::move(replies)]() mutable {
      std::move(h)(error, std::move(r));
    });
  }

  // On the strand: the first failure breaks the connection for good.
  void fail(StoreError error) {
    if (broken_) return;
    broken_.emplace(std::move(error));
    lost_replies_.store(!waiting_.empty(), std::memory_order_release);
    broken_flag_.store(true, std::memory_order_release);
    boost::system::error_code ignored;
    socket_.close(ignored);
    watchdog_.cancel();
    std::deque<Waiting> waiting = std::move(waiting_);
    waiting_.clear();
    for (Waiting& w : waiting)
      complete(std::move(w.handler), std::make_exception_ptr(*broken_), {});
  }

  net::awaitable<void> connect() {
    using namespace net::experimental::awaitable_operators;
    net::steady_timer deadline(strand_, params_.connect_timeout);
    std::optional<boost::system::error_code> failed;
    if (!address_.unix_socket.empty()) {
      const net::local::stream_protocol::endpoint unix_endpoint(address_.unix_socket);
      boost::system::error_code ec;
      const auto first =
          co_await (socket_.async_connect(net::generic::stream_protocol::endpoint(unix_endpoint),
                                          net::redirect_error(net::use_awaitable, ec)) ||
                    deadline.async_wait(net::use_awaitable));
      if (first.index() == 1) failed = net::error::timed_out;
      if (ec) failed = ec;
    } else {
      net::ip::tcp::resolver resolver(strand_);
      boost::system::error_code ec;
      const auto endpoints =
          co_await resolver.async_resolve(address_.host, std::to_string(address_.port),
                                          net::redirect_error(net::use_awaitable, ec));
      if (ec) failed = ec;
      for (auto it = endpoints.begin(); !failed && it != endpoints.end(); ++it) {
        ec = {};
        const auto first =
            co_await (socket_.async_connect(net::generic::stream_protocol::endpoint(it->endpoint()),
                                            net::redirect_error(net::use_awaitable, ec)) ||
                      deadline.async_wait(net::use_awaitable));
        if (first.index() == 1) {
          failed = net::error::timed_out;
        } else if (ec) {
          boost::system::error_code ignored;
          socket_.close(ignored);
          if (std::next(it) == endpoints.end()) failed = ec;
        } else {
          break;
        }
      }
      if (!failed) {
        boost::system::error_code ignored;
        socket_.set_option(net::ip::tcp::no_delay(true), ignored);
        socket_.set_option(net::socket_base::keep_alive(true), ignored);
      }
    }
    if (failed && *failed == net::error::connection_refused) {
      throw ConnectionRefused(client_error(code::other, "cannot connect: " + failed->message()));
    }
    if (failed) throw client_error(code::other, "cannot connect: " + failed->message());
    try {
      std::vector<std::vector<std::string_view>> setup;
      const std::string database = std::to_string(params_.database);
      if (!params_.password.empty()) {
        if (params_.user.empty()) {
          setup.push_back({"AUTH", params_.password});
        } else {
          setup.push_back({"AUTH", params_.user, params_.password});
        }
      }
      if (params_.database != 0) setup.push_back({"SELECT", database});
      if (!params_.client_name.empty()) setup.push_back({"CLIENT", "SETNAME", params_.client_name});
      setup.push_back({"CLIENT", "ID"});
      const std::vector<Command> list(setup.begin(), setup.end());
      std::vector<Reply> replies = co_await commands(list);
      for (Reply& r : replies)
        r = checked(std::move(r));
      id_ = static_cast<unsigned long>(replies.back().integer());
    } catch (const StoreError& e) {
      close();
      // A refused AUTH or SELECT is the configuration's fault, not the moment's.
      throw StoreError(fmt::format("idem::redis: cannot set up the connection to {}: {}", where(),
                                   e.diagnostics().message),
                       !e.diagnostics().from_server, e.diagnostics());
    }
  }

  StoreError lost(const boost::system::error_code& ec) const {
    const bool eof = ec == net::error::eof || ec == net::error::connection_reset;
    return client_error(eof ? code::eof : code::io,
                        eof ? std::string("the server closed the connection") : ec.message());
  }
  StoreError client_error(unsigned c, std::string_view text) const {
    return StoreError(fmt::format("idem::redis: {}: {}", where(), text), c != code::protocol,
                      Diagnostics{c, "", std::string(text), false});
  }

  ConnectionParams params_;
  Address address_;
  net::strand<net::any_io_executor> strand_;
  net::generic::stream_protocol::socket socket_;
  net::steady_timer watchdog_;
  redisReader* reader_;
  std::string out_;      // commands not written yet
  std::string writing_;  // the commands being written
  bool writing_now_ = false;
  bool reading_now_ = false;
  bool watching_ = false;
  std::array<char, 16 * 1024> in_{};  // what the last read brought
  std::deque<Waiting> waiting_;       // in the order their replies come
  std::optional<StoreError> broken_;
  std::atomic<bool> broken_flag_{false};
  std::atomic<bool> lost_replies_{false};
  unsigned long id_ = 0;
};

}  // namespace idem::redis::detail
