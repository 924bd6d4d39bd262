#pragma once
// One hiredis connection to one server: the wire under idem::redis::Connection, which routes
// over one link (a single server) or one per cluster node.
//
// - Opening connects within connect_timeout, sets read_timeout on the socket, then AUTH,
//   SELECT and CLIENT SETNAME as the parameters ask. Any failure is a StoreError.
// - A failure on the client side (the connection broke, a reply timed out) leaves the link
//   broken: hiredis cannot use it again.
// - Commands can be pipelined: append() them, then receive() the replies in order.

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <sys/time.h>
#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include "idem/errors.hpp"
#include "idem/redis/connection_params.hpp"
#include "idem/redis/errors.hpp"
#include "idem/redis/reply.hpp"

namespace idem::redis::detail {

// Where a link goes: a unix socket, or host and port.
struct Address {
  std::string host;
  unsigned port = 0;
  std::string unix_socket;

  std::string text() const {
    return unix_socket.empty() ? fmt::format("{}:{}", host, port) : unix_socket;
  }
  // "host:port" (the last ':' splits, so an IPv6 host keeps its colons).
  static Address parse(std::string_view host_port) {
    const auto colon = host_port.rfind(':');
    unsigned port = 0;
    bool ok = colon != std::string_view::npos && colon > 0 && colon + 1 < host_port.size();
    for (std::size_t i = colon + 1; ok && i < host_port.size(); ++i) {
      const char c = host_port[i];
      ok = c >= '0' && c <= '9' && port < 65536;
      port = port * 10 + static_cast<unsigned>(c - '0');
    }
    if (!ok || port == 0 || port > 65535) {
      throw InvalidArgument(fmt::format("idem::redis: \"{}\" is not host:port", host_port));
    }
    return {std::string(host_port.substr(0, colon)), port, {}};
  }
};

// hiredis writes with write(2): a write to a connection the server closed raises SIGPIPE,
// whose default action ends the process. While a link writes, SIGPIPE is blocked in the
// calling thread, and one the write raised is taken off the thread's pending signals; the
// process's own handling of SIGPIPE is left as it is.
class SigpipeGuard {
 public:
  SigpipeGuard() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec none{0, 0};
        sigtimedwait(&pipe_, nullptr, &none);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

class Link {
 public:
  Link(const ConnectionParams& params, Address address)
      : address_(std::move(address)), read_timeout_(params.read_timeout) {
    try {
      open(params);
    } catch (...) {
      if (ctx_ != nullptr) redisFree(ctx_);
      throw;
    }
  }
  ~Link() {
    if (ctx_ != nullptr) redisFree(ctx_);
  }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  void append(std::span<const std::string_view> args) {
    if (broken()) throw client_error("the connection is broken");
    argv_.clear();
    lens_.clear();
    for (const std::string_view a : args) {
      argv_.push_back(a.data());
      lens_.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(args.size()), argv_.data(), lens_.data()) !=
        REDIS_OK) {
      throw client_error("cannot send a command");
    }
    unsent_ = true;
  }
  void append(std::initializer_list<std::string_view> args) {
    append(std::span<const std::string_view>(args.begin(), args.size()));
  }

  // The next reply; a client failure throws and leaves the link broken.
  Reply receive() {
    void* r = nullptr;
    int rc = REDIS_OK;
    if (unsent_) {
      // The first receive after append() writes what was appended.
      const SigpipeGuard guard;
      unsent_ = false;
      rc = redisGetReply(ctx_, &r);
    } else {
      rc = redisGetReply(ctx_, &r);
    }
    if (rc != REDIS_OK || r == nullptr) {
      if (r != nullptr) freeReplyObject(r);
      throw client_error("the reply was lost");
    }
    return Reply(static_cast<redisReply*>(r));
  }

  // The reply, or its error as a StoreError with the server's text.
  Reply checked(Reply r) const {
    if (!r.is_error()) return r;
    throw server_error(where(), r.text());
  }

  Reply command(std::span<const std::string_view> args) {
    append(args);
    return checked(receive());
  }
  Reply command(std::initializer_list<std::string_view> args) {
    return command(std::span<const std::string_view>(args.begin(), args.size()));
  }

  bool broken() const noexcept { return ctx_ == nullptr || ctx_->err != 0; }
  std::string where() const { return address_.text(); }
  const Address& address() const noexcept { return address_; }

 private:
  static timeval to_timeval(std::chrono::milliseconds d) {
    return timeval{static_cast<time_t>(d.count() / 1000),
                   static_cast<suseconds_t>((d.count() % 1000) * 1000)};
  }

  void open(const ConnectionParams& params) {
    const timeval connect = to_timeval(params.connect_timeout);
    ctx_ = address_.unix_socket.empty()
               ? redisConnectWithTimeout(address_.host.c_str(), static_cast<int>(address_.port),
                                         connect)
               : redisConnectUnixWithTimeout(address_.unix_socket.c_str(), connect);
    if (ctx_ == nullptr) {
      throw StoreError(fmt::format("idem::redis: cannot allocate a connection to {}", where()),
                       true, Diagnostics{code::oom, "", "out of memory", false});
    }
    if (ctx_->err != 0) throw client_error("cannot connect");
    try {
      if (redisSetTimeout(ctx_, to_timeval(params.read_timeout)) != REDIS_OK) {
        throw client_error("cannot set the read timeout");
      }
      if (address_.unix_socket.empty()) redisEnableKeepAlive(ctx_);
      if (!params.password.empty()) {
        if (params.user.empty()) {
          command({"AUTH", params.password});
        } else {
          command({"AUTH", params.user, params.password});
        }
      }
      if (params.database != 0) command({"SELECT", std::to_string(params.database)});
      if (!params.client_name.empty()) command({"CLIENT", "SETNAME", params.client_name});
    } catch (const StoreError& e) {
      // A refused AUTH or SELECT is the configuration's fault, not the moment's.
      throw StoreError(fmt::format("idem::redis: cannot set up the connection to {}: {}", where(),
                                   e.diagnostics().message),
                       !e.diagnostics().from_server, e.diagnostics());
    }
  }

  StoreError client_error(std::string_view what) const {
    const unsigned c =
        ctx_ == nullptr || ctx_->err == 0 ? code::other : static_cast<unsigned>(ctx_->err);
    std::string text = ctx_ == nullptr || ctx_->err == 0 ? std::string("no connection")
                                                         : std::string(ctx_->errstr);
    // hiredis reports a timed-out read as an I/O error with EAGAIN's text.
    if (c == code::io && text.find("temporarily unavailable") != std::string::npos) {
      text = fmt::format("no reply within the read timeout of {} ms", read_timeout_.count());
    }
    return StoreError(fmt::format("idem::redis: {} ({}): {}", what, where(), text),
                      c != code::protocol, Diagnostics{c, "", text, false});
  }

  Address address_;
  std::chrono::milliseconds read_timeout_;
  redisContext* ctx_ = nullptr;
  bool unsent_ = false;  // appended commands not written yet
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
};

}  // namespace idem::redis::detail
