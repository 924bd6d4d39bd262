#pragma once
// idem::redis::AsyncConnection: a session with one Redis server, or with a Redis Cluster,
// driven by the caller's Asio executor and shared by every coroutine that uses it. Commands
// are pipelined (idem/redis/detail/async_link.hpp): the writes of many callers leave in one
// send and each reply comes back to its caller. No thread waits on it.
//
//   auto c = co_await idem::redis::AsyncConnection::open(params);
//   const std::vector<std::string_view> ping{"PING"};  // (GCC 12: no braced list in a co_await)
//   idem::redis::Reply pong = co_await c->command(ping);
//
// - A single server: one pipelined link, opened at once. A reply later than read_timeout, a
//   broken socket or a reply that cannot be parsed breaks the connection: every command
//   waiting fails with a retryable StoreError whose diagnostics say the reply was lost (it may
//   have run), and so does every later one. AsyncPool (idem/redis/async_pool.hpp) opens a new
//   one in its place.
// - A cluster (ConnectionParams::cluster_nodes), as the blocking Connection: it reads which node
//   serves which hash slot (CLUSTER SLOTS) before open() returns, keeps one pipelined link per
//   node it needed, opened when first needed and shared by every caller, and sends each script
//   to the node serving its keys' slot. MOVED updates the map and sends the script on; ASK
//   sends it once to the node named, after ASKING. A link that broke, or a node that could not
//   be reached, fails its callers' commands (retryable) and makes the next caller read the map
//   again, so that the session follows a failover to the promoted replica. The session itself
//   never breaks.
// - A command waits for its reply; it cannot be cancelled (a reply to a command already sent
//   must still be read, and idem's scripts are short), so a caller cancelled meanwhile sees its
//   cancellation at its next co_await.
// - An error reply of the server is a StoreError with the reply in its Diagnostics (checked()).
// - Scripts run by EVALSHA, and by EVAL when the node answers NOSCRIPT.
// - It lives on the executor it was opened on (each link on a strand of it), which must be
//   running while it is used: callers may run on any thread of that loop, or on other loops;
//   each resumes on its own executor.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/async/net.hpp"
#include "idem/errors.hpp"
#include "idem/redis/connection_params.hpp"
#include "idem/redis/detail/async_link.hpp"
#include "idem/redis/detail/link.hpp"
#include "idem/redis/detail/script.hpp"
#include "idem/redis/detail/slot.hpp"
#include "idem/redis/detail/slot_map.hpp"
#include "idem/redis/errors.hpp"
#include "idem/redis/reply.hpp"

namespace idem::redis {

namespace net = async::net;

namespace detail {

// The cluster links that broke while commands were out on them, by the id of the
// AsyncConnection that used them: a command there may still run on its node, which
// AsyncStore's clean-up after a cancelled claim waits out (idem/redis/async_store.hpp). The
// clean-up may run on another connection of the pool than the one that lost the link, so the
// list is the process's. Each connection keeps its latest few.
class LostLinks {
 public:
  struct Lost {
    Address node;
    unsigned long client;  // the node's id of the link (CLIENT ID)
  };

  static LostLinks& of_process() {
    static LostLinks lost;
    return lost;
  }

  void add(unsigned long connection, Lost l) {
    const std::lock_guard lock(mutex_);
    std::vector<Lost>& list = by_connection_[connection];
    if (list.size() == kept) list.erase(list.begin());
    list.push_back(std::move(l));
  }
  std::vector<Lost> of(unsigned long connection) {
    const std::lock_guard lock(mutex_);
    const auto it = by_connection_.find(connection);
    return it == by_connection_.end() ? std::vector<Lost>{} : it->second;
  }
  // Forgets what of(connection) answered: those links are done with.
  void settled(unsigned long connection, const std::vector<Lost>& done) {
    const std::lock_guard lock(mutex_);
    const auto it = by_connection_.find(connection);
    if (it == by_connection_.end()) return;
    std::erase_if(it->second, [&](const Lost& l) {
      for (const Lost& d : done)
        if (d.client == l.client && d.node.text() == l.node.text()) return true;
      return false;
    });
    if (it->second.empty()) by_connection_.erase(it);
  }
  void forget(unsigned long connection) {
    const std::lock_guard lock(mutex_);
    by_connection_.erase(connection);
  }

 private:
  static constexpr std::size_t kept = 32;
  std::mutex mutex_;
  std::map<unsigned long, std::vector<Lost>> by_connection_;
};

// The reading of a cluster session's map under way (AsyncConnection::read_map): its end, also
// by an exception or a cancellation that destroys the reading coroutine, lets the next caller
// read. (At namespace scope: GCC 12 cannot compile a class local to a coroutine.)
class MapReading {
 public:
  MapReading(std::mutex& mutex, bool& reading, std::uint64_t& ended) noexcept
      : mutex_(mutex), reading_(reading), ended_(ended) {}
  ~MapReading() {
    const std::lock_guard lock(mutex_);
    reading_ = false;
    ++ended_;
  }
  MapReading(const MapReading&) = delete;
  MapReading& operator=(const MapReading&) = delete;

 private:
  std::mutex& mutex_;
  bool& reading_;
  std::uint64_t& ended_;
};

}  // namespace detail

class AsyncConnection : public std::enable_shared_from_this<AsyncConnection> {
  struct Private {};

 public:
  // A command: its arguments, the name first.
  using Command = std::span<const std::string_view>;

  // Opens a session that lives on `executor`: a single server's link, or a cluster's slot
  // map. Throws StoreError.
  static net::awaitable<std::shared_ptr<AsyncConnection>> open(net::any_io_executor executor,
                                                               ConnectionParams params) {
    auto c = std::make_shared<AsyncConnection>(Private{}, executor, std::move(params));
    if (c->cluster()) {
      co_await c->read_map(true);
    } else {
      const detail::Address address{c->params_.host, c->params_.port, c->params_.unix_socket};
      c->single_ = co_await detail::AsyncLink::open(executor, c->params_, address);
    }
    co_return c;
  }
  // The same on the calling coroutine's executor.
  static net::awaitable<std::shared_ptr<AsyncConnection>> open(ConnectionParams params) {
    co_return co_await open(co_await net::this_coro::executor, std::move(params));
  }

  AsyncConnection(Private, net::any_io_executor executor, ConnectionParams params)
      : params_(std::move(params)), executor_(std::move(executor)) {
    for (const std::string& node : params_.cluster_nodes)
      seeds_.push_back(detail::Address::parse(node));
    if (cluster()) id_ = next_cluster_id().fetch_add(1, std::memory_order_relaxed);
  }
  ~AsyncConnection() {
    if (cluster()) detail::LostLinks::of_process().forget(id_);
  }
  AsyncConnection(const AsyncConnection&) = delete;
  AsyncConnection& operator=(const AsyncConnection&) = delete;

  // One command's reply, an error reply included (checked() turns it into a StoreError). In
  // a cluster, to the node serving the slot of its first argument after the command's name
  // (its key), without redirections. (On a single server, this and the calls below are the
  // link's own coroutines: no coroutine frame more per call.)
  net::awaitable<Reply> command(Command args) {
    if (!cluster()) return single_->command(args);
    return cluster_command(args);
  }
  // The commands, pipelined: written together, their replies in the same order. In a cluster,
  // all to the node of the first command's key.
  net::awaitable<std::vector<Reply>> commands(std::span<const Command> list) {
    if (!cluster()) return single_->commands(list);
    return cluster_commands(list);
  }

  // The reply, or its error as a StoreError with the server's text.
  Reply checked(Reply r) const {
    if (r.is_error()) throw detail::server_error(where(), r.text());
    return r;
  }

  // Runs a script by its SHA1 (on the node serving its keys), and by its source when the
  // server does not know it yet; the reply checked.
  net::awaitable<Reply> eval(const detail::Script& script, const ScriptCall& call) {
    if (!cluster()) return single_->eval(script, call);
    return cluster_eval(script, call);
  }

  // The script once per call, pipelined (in a cluster, one pipeline per node); the replies
  // checked, in the calls' order (an error reply throws once every reply has arrived).
  net::awaitable<std::vector<Reply>> eval_all(const detail::Script& script,
                                              std::span<const ScriptCall> calls) {
    if (!cluster()) return single_->eval_all(script, calls);
    return cluster_eval_all(script, calls);
  }

  // Breaks a single server's connection (every command waiting fails, as after a lost
  // socket); closes a cluster session's links.
  void close() {
    if (!cluster()) {
      if (single_) single_->close();
      return;
    }
    std::vector<std::shared_ptr<detail::AsyncLink>> open;
    {
      const std::lock_guard lock(mutex_);
      for (auto& [name, slot] : links_)
        if (slot.link) open.push_back(slot.link);
    }
    for (const auto& l : open)  // outside the lock: a closed link completes its callers
      l->close();
  }

  // A single server's connection is broken after a client failure; a cluster session never is
  // (it reopens the links it needs).
  bool broken() const noexcept { return !cluster() && (single_ == nullptr || single_->broken()); }
  bool cluster() const noexcept { return !seeds_.empty(); }

  // A single server's id of this connection (CLIENT ID), unique on the server and never 0; a
  // cluster session's own number, unique in the process (its links' ids are the nodes').
  unsigned long id() const noexcept { return cluster() ? id_ : single_->id(); }

  // The cluster links this session lost with commands out on them (detail::LostLinks), for
  // the session numbered `id`; settled_links() forgets those that were waited out.
  std::vector<detail::LostLinks::Lost> lost_links(unsigned long id) const {
    return detail::LostLinks::of_process().of(id);
  }
  void settled_links(unsigned long id, const std::vector<detail::LostLinks::Lost>& done) const {
    detail::LostLinks::of_process().settled(id, done);
  }
  // One command to the cluster node `node`, over this session's link to it. Throws StoreError.
  net::awaitable<Reply> command_on(const detail::Address& node, Command args) {
    const std::shared_ptr<detail::AsyncLink> l = co_await link(node);
    co_return co_await on_link(*l, [&] { return l->command(args); });
  }

  // Where the session goes, for messages: the socket path or host:port, or the cluster's
  // seed nodes.
  std::string where() const { return detail::session_text(params_, seeds_); }
  const ConnectionParams& params() const noexcept { return params_; }

 private:
  struct LinkSlot {
    std::shared_ptr<detail::AsyncLink> link;
    bool opening = false;  // a caller is opening it; the others wait
  };

  net::awaitable<Reply> cluster_command(Command args) {
    const std::uint16_t slot = args.size() > 1 ? slot_of(args[1]) : 0;
    const std::shared_ptr<detail::AsyncLink> l = co_await route(slot);
    co_return co_await on_link(*l, [&] { return l->command(args); });
  }
  net::awaitable<std::vector<Reply>> cluster_commands(std::span<const Command> list) {
    const std::uint16_t slot =
        !list.empty() && list.front().size() > 1 ? slot_of(list.front()[1]) : 0;
    const std::shared_ptr<detail::AsyncLink> l = co_await route(slot);
    co_return co_await on_link(*l, [&] { return l->commands(list); });
  }
  net::awaitable<Reply> cluster_eval(const detail::Script& script, const ScriptCall& call) {
    const std::uint16_t slot = detail::call_slot(call);
    std::optional<detail::Address> ask;
    for (int hop = 0;; ++hop) {
      std::shared_ptr<detail::AsyncLink> l;
      if (ask) {
        l = co_await link(*ask);
      } else {
        l = co_await route(slot);
      }
      const bool asking = ask.has_value();
      Reply r = co_await run(*l, script, call, asking);
      ask.reset();
      const detail::Redirect redirect = detail::Redirect::of(r, l->address());
      if (redirect.kind == detail::Redirect::none || hop == detail::max_redirections) {
        co_return l->checked(std::move(r));
      }
      if (redirect.kind == detail::Redirect::moved) {
        const std::lock_guard lock(mutex_);
        map_.moved(slot, redirect.to);
      } else {
        ask = redirect.to;
      }
    }
  }

  net::awaitable<std::vector<Reply>> cluster_eval_all(const detail::Script& script,
                                                      std::span<const ScriptCall> calls) {
    // The calls by the node that serves them, each node's sent as one pipeline.
    std::vector<std::pair<detail::Address, std::vector<std::size_t>>> by_node;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const detail::Address node = co_await owner(detail::call_slot(calls[i]));
      auto g = by_node.begin();
      while (g != by_node.end() && g->first.text() != node.text())
        ++g;
      if (g == by_node.end()) g = by_node.insert(by_node.end(), {node, {}});
      g->second.push_back(i);
    }
    std::vector<std::optional<Reply>> replies(calls.size());
    std::vector<std::shared_ptr<detail::AsyncLink>> via(calls.size());
    for (const auto& [node, indexes] : by_node) {
      const std::shared_ptr<detail::AsyncLink> l = co_await link(node);
      std::vector<std::vector<std::string_view>> args;
      args.reserve(indexes.size());
      for (const std::size_t i : indexes)
        args.push_back(detail::script_args(script, calls[i]));
      const std::vector<Command> list(args.begin(), args.end());
      std::vector<Reply> got = co_await on_link(*l, [&] { return l->commands(list); });
      for (std::size_t k = 0; k < indexes.size(); ++k) {
        replies[indexes[k]].emplace(std::move(got[k]));
        via[indexes[k]] = l;
      }
    }
    std::vector<Reply> out;
    out.reserve(calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      Reply& r = *replies[i];
      if (detail::unknown_script(r) ||
          detail::Redirect::of(r, via[i]->address()).kind != detail::Redirect::none) {
        out.push_back(co_await eval(script, calls[i]));
      } else {
        out.push_back(via[i]->checked(std::move(r)));
      }
    }
    co_return out;
  }

  static std::atomic<unsigned long>& next_cluster_id() {
    static std::atomic<unsigned long> next{1};
    return next;
  }
  static std::uint16_t slot_of(std::string_view key) noexcept { return detail::key_slot(key); }

  // One EVALSHA on `l` (after ASKING when `asking`), and EVAL when the node answers NOSCRIPT.
  net::awaitable<Reply> run(detail::AsyncLink& l, const detail::Script& script,
                            const ScriptCall& call, bool asking) {
    std::vector<std::string_view> args = detail::script_args(script, call);
    const std::array<std::string_view, 1> asking_command{"ASKING"};
    for (int pass = 0;; ++pass) {
      std::optional<Reply> r;
      if (asking) {
        const std::array<Command, 2> two{Command(asking_command), Command(args)};
        std::vector<Reply> replies = co_await on_link(l, [&] { return l.commands(two); });
        r.emplace(std::move(replies[1]));
      } else {
        const Command one(args);
        r.emplace(co_await on_link(l, [&] { return l.command(one); }));
      }
      if (pass == 1 || !detail::unknown_script(*r)) co_return std::move(*r);
      detail::send_source(script, args);
    }
  }

  // send() on link `l`; a failure that broke the link makes the session forget it (and read
  // the map again before its next command).
  template <class Send>
  net::awaitable<typename std::invoke_result_t<Send>::value_type> on_link(detail::AsyncLink& l,
                                                                          Send send) {
    try {
      co_return co_await send();
    } catch (const StoreError&) {
      if (l.broken()) forget(l);
      throw;
    }
  }

  // The node serving `slot`, from the map (read again first when it is stale).
  net::awaitable<detail::Address> owner(std::uint16_t slot) {
    bool stale = false;
    {
      const std::lock_guard lock(mutex_);
      stale = stale_ || map_.empty();
    }
    if (stale) co_await read_map(false);
    std::optional<detail::Address> node;
    {
      const std::lock_guard lock(mutex_);
      node = map_.owner(slot);
    }
    if (!node) {
      co_await read_map(true);  // a map read now, not the one another caller is replacing
      const std::lock_guard lock(mutex_);
      node = map_.owner(slot);
    }
    if (!node) throw detail::no_owner(where(), slot);
    co_return std::move(*node);
  }
  net::awaitable<std::shared_ptr<detail::AsyncLink>> route(std::uint16_t slot) {
    const detail::Address node = co_await owner(slot);
    co_return co_await link(node);
  }

  // The open link to `node`, opened now if there is none (or it broke). One caller opens it;
  // the others wait for it as long as opening may take (connecting, then the set-up's replies).
  net::awaitable<std::shared_ptr<detail::AsyncLink>> link(const detail::Address& node) {
    const std::string name = node.text();
    const auto deadline =
        std::chrono::steady_clock::now() + params_.connect_timeout + params_.read_timeout;
    for (Duration pause{1};; pause = std::min(2 * pause, Duration{16})) {
      bool open_it = false;
      {
        const std::lock_guard lock(mutex_);
        LinkSlot& s = links_[name];
        if (s.link && !s.link->broken()) co_return s.link;
        if (s.link) drop_locked(s);
        if (!s.opening) open_it = s.opening = true;
      }
      if (open_it) co_return co_await open_link(name, node);
      if (std::chrono::steady_clock::now() >= deadline) {
        throw StoreError(
            fmt::format("idem::redis: the connection to {} did not open within "
                        "connect_timeout and read_timeout ({} ms)",
                        name, (params_.connect_timeout + params_.read_timeout).count()),
            true, Diagnostics{code::other, "", "no connection", false});
      }
      co_await async::sleep_for(pause);
    }
  }

  net::awaitable<std::shared_ptr<detail::AsyncLink>> open_link(const std::string& name,
                                                               const detail::Address& node) {
    std::shared_ptr<detail::AsyncLink> opened;
    std::exception_ptr failed;
    try {
      opened = co_await detail::AsyncLink::open(executor_, params_, node);
    } catch (...) {
      failed = std::current_exception();
    }
    {
      const std::lock_guard lock(mutex_);
      LinkSlot& s = links_[name];
      s.opening = false;
      s.link = opened;
      if (!opened) stale_ = true;  // the node may be gone: a replica may serve its slots by now
    }
    if (failed) std::rethrow_exception(failed);
    co_return opened;
  }

  // A link that broke leaves the session, which reads the map before its next command.
  void forget(detail::AsyncLink& l) {
    const std::lock_guard lock(mutex_);
    stale_ = true;
    const auto it = links_.find(l.where());
    if (it != links_.end() && it->second.link.get() == &l) drop_locked(it->second);
  }
  // Under mutex_, so that a settle that follows the failure it was told of finds the link: a
  // link broken with commands out is remembered (detail::LostLinks), then let go.
  void drop_locked(LinkSlot& s) {
    if (s.link->lost_replies()) {
      detail::LostLinks::of_process().add(id_, {s.link->address(), s.link->id()});
    }
    s.link.reset();
    stale_ = true;
  }

  // Reads the slot map from the first node that answers: the nodes known from the last map,
  // then the seeds. One caller reads it; while it does, the others go on with the map they
  // have, or (`fresh`, or no map yet) wait for its map.
  net::awaitable<void> read_map(bool fresh) {
    std::vector<detail::Address> candidates;
    std::optional<std::uint64_t> waited_for;  // maps_read_ when this caller began to wait
    for (Duration pause{1};; pause = std::min(2 * pause, Duration{16})) {
      {
        const std::lock_guard lock(mutex_);
        if (!reading_map_) {
          if (waited_for && *waited_for != maps_read_) co_return;  // the reader's map is new
          reading_map_ = true;
          candidates = map_.candidates(seeds_);
          break;
        }
        if (!fresh && !map_.empty()) co_return;
        if (!waited_for) waited_for = maps_read_;
      }
      co_await async::sleep_for(pause);
    }
    const detail::MapReading reading(mutex_, reading_map_, maps_read_);
    std::optional<StoreError> last;
    for (const detail::Address& a : candidates) {
      try {
        const std::vector<std::string_view> slots{"CLUSTER", "SLOTS"};
        Reply r = co_await command_on(a, slots);
        const Reply map = checked(std::move(r));
        const std::lock_guard lock(mutex_);
        map_.read(map, a);
        stale_ = false;
        co_return;
      } catch (const StoreError& e) {
        last = e;
      }
    }
    throw last ? *last : detail::no_node_answered(where());
  }

  ConnectionParams params_;
  net::any_io_executor executor_;
  std::vector<detail::Address> seeds_;
  std::shared_ptr<detail::AsyncLink> single_;  // a single server
  // A cluster: the slot map and the links by node, under mutex_ (callers run on any thread).
  unsigned long id_ = 0;
  std::mutex mutex_;
  detail::SlotMap map_;
  std::map<std::string, LinkSlot> links_;
  bool stale_ = false;
  bool reading_map_ = false;     // a caller is reading the map
  std::uint64_t maps_read_ = 0;  // readings ended, read or not
};

}  // namespace idem::redis
