#pragma once
// idem::redis::Connection: a session with one Redis server, or with a Redis Cluster, for one
// thread at a time (the Pool hands it out).
//
// - A single server: one connection (detail::Link), opened at once. A failure on the client
//   side (the connection broke, a reply timed out) leaves the session broken, and the Pool
//   opens it again.
// - A cluster (ConnectionParams::cluster_nodes): the session reads which node serves which
//   hash slot (CLUSTER SLOTS), keeps one connection per node it needed, opened when first
//   needed, and sends each script to the node that serves its keys' slot. A MOVED reply
//   (the slot moved for good) updates the map and sends the script on; ASK (the slot is
//   moving) sends it, once, to the node named, after ASKING. A node that cannot be reached
//   makes the session read the map again before its next command, so that it follows a
//   failover to the promoted replica.
// - An error reply of the server is a StoreError with the reply in its Diagnostics.
// - Scripts run by EVALSHA; a server that does not know the script (restarted, flushed, a
//   new node) answers NOSCRIPT, and the script is sent whole with EVAL, which caches it.
//
// Every argument is passed with its length: keys and values are binary-safe.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/redis/connection_params.hpp"
#include "idem/redis/detail/link.hpp"
#include "idem/redis/detail/script.hpp"
#include "idem/redis/detail/slot.hpp"
#include "idem/redis/detail/slot_map.hpp"
#include "idem/redis/errors.hpp"
#include "idem/redis/reply.hpp"

namespace idem::redis {

class Connection {
 public:
  explicit Connection(ConnectionParams params) : params_(std::move(params)) {
    for (const std::string& node : params_.cluster_nodes)
      seeds_.push_back(detail::Address::parse(node));
    if (cluster()) {
      refresh_slots();
    } else {
      single_ = std::make_unique<detail::Link>(
          params_, detail::Address{params_.host, params_.port, params_.unix_socket});
    }
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends one command and waits for its reply; in a cluster, to the node serving the slot of
  // its first argument after the command's name (its key), and without redirections. Throws
  // StoreError on a client failure or an error reply.
  Reply command(std::span<const std::string_view> args) {
    detail::Link& l = cluster() ? route(args.size() > 1 ? detail::key_slot(args[1]) : 0) : *single_;
    return l.command(args);
  }
  Reply command(std::initializer_list<std::string_view> args) {
    return command(std::span<const std::string_view>(args.begin(), args.size()));
  }

  // Runs a script by its SHA1 on the node serving its keys, and by its source when that node
  // does not know it yet.
  Reply eval(const detail::Script& script, const ScriptCall& call) {
    const std::vector<std::string_view> args = evalsha_args(script, call);
    if (!cluster()) return single_->checked(run(*single_, script, args, false));
    const std::uint16_t slot = detail::call_slot(call);
    std::optional<detail::Address> ask;
    for (int hop = 0;; ++hop) {
      detail::Link& l = ask ? link(*ask) : route(slot);
      Reply r = run(l, script, args, ask.has_value());
      ask.reset();
      const detail::Redirect redirect = detail::Redirect::of(r, l.address());
      if (redirect.kind == detail::Redirect::none || hop == detail::max_redirections) {
        return l.checked(std::move(r));
      }
      if (redirect.kind == detail::Redirect::moved) {
        map_.moved(slot, redirect.to);
      } else {
        ask = redirect.to;
      }
    }
  }

  // Runs the script once per call, pipelined: every call to a node is written before the
  // first reply is read (one round trip per node). The replies come in the calls' order; an
  // error reply throws after every reply was read, so each connection stays in step.
  std::vector<Reply> eval_all(const detail::Script& script, std::span<const ScriptCall> calls) {
    std::vector<std::optional<Reply>> replies(calls.size());
    // The calls by the node that serves them, in order. The map is read (and maybe read
    // again) for every call first, and only then are the links opened: reading the map may
    // replace a broken link, which a pointer taken earlier would still name.
    std::vector<std::string> node(calls.size());
    std::vector<detail::Address> address(calls.size());
    if (cluster()) {
      for (std::size_t i = 0; i < calls.size(); ++i) {
        address[i] = node_for(detail::call_slot(calls[i]));
        node[i] = address[i].text();
      }
    }
    std::vector<std::pair<std::size_t, std::vector<std::size_t>>> by_node;  // first call, calls
    for (std::size_t i = 0; i < calls.size(); ++i) {
      auto g = std::find_if(by_node.begin(), by_node.end(),
                            [&](auto& e) { return node[e.first] == node[i]; });
      if (g == by_node.end()) g = by_node.insert(by_node.end(), {i, {}});
      g->second.push_back(i);
    }
    std::vector<detail::Link*> via(calls.size());
    std::vector<std::pair<detail::Link*, std::vector<std::size_t>>> groups;
    for (auto& [first, indexes] : by_node) {
      detail::Link* l = cluster() ? &link(address[first]) : single_.get();
      for (const std::size_t i : indexes)
        via[i] = l;
      groups.emplace_back(l, std::move(indexes));
    }
    try {
      for (auto& [l, indexes] : groups) {
        for (const std::size_t i : indexes)
          l->append(evalsha_args(script, calls[i]));
      }
      for (auto& [l, indexes] : groups) {
        for (const std::size_t i : indexes)
          replies[i] = l->receive();
      }
    } catch (...) {
      // A link that failed mid-pipeline is broken; the others may still owe replies, which
      // the next user must not read as its own: close them.
      for (auto& [l, indexes] : groups)
        drop(*l);
      throw;
    }
    std::vector<Reply> out;
    out.reserve(calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      Reply& r = *replies[i];
      if (r.is_error()) {
        const std::string_view name = error_name(r.text());
        if (name == "NOSCRIPT" || name == "MOVED" || name == "ASK") {
          out.push_back(eval(script, calls[i]));
          continue;
        }
      }
      out.push_back(via[i]->checked(std::move(r)));
    }
    return out;
  }

  // PING; false when the server (in a cluster: a node) does not answer.
  bool ping() noexcept {
    try {
      return command({"PING"}).text() == "PONG";
    } catch (const Error&) {
      return false;
    }
  }

  // Opens again: the single server's connection, or the cluster's map and connections.
  // Throws StoreError.
  void reconnect() {
    if (cluster()) {
      links_.clear();
      refresh_slots();
    } else {
      single_.reset();
      single_ = std::make_unique<detail::Link>(
          params_, detail::Address{params_.host, params_.port, params_.unix_socket});
    }
  }

  // A single server's session is broken after a client failure; a cluster's never is (it
  // reopens the connection it needs), unless it has no map.
  bool broken() const noexcept {
    return cluster() ? map_.empty() : single_ == nullptr || single_->broken();
  }
  bool cluster() const noexcept { return !seeds_.empty(); }
  const ConnectionParams& params() const noexcept { return params_; }

  // The node that serves `key`: in a cluster the master of its slot, from the slot map (read
  // first if there is none yet); otherwise the one server. For operators finding a key.
  std::string node_of(std::string_view key) {
    if (!cluster()) return where();
    return node_for(detail::key_slot(key)).text();
  }

  // Where the session goes, for messages: the socket path or host:port, or the cluster's
  // seed nodes.
  std::string where() const { return detail::session_text(params_, seeds_); }

 private:
  static std::vector<std::string_view> evalsha_args(const detail::Script& script,
                                                    const ScriptCall& call) {
    return detail::script_args(script, call);
  }

  // One EVALSHA on `l` (after ASKING when `asking`), and EVAL when the node answers NOSCRIPT.
  // A client failure drops the link and throws.
  Reply run(detail::Link& l, const detail::Script& script, std::vector<std::string_view> args,
            bool asking) {
    try {
      for (int pass = 0;; ++pass) {
        if (asking) l.append({"ASKING"});
        l.append(args);
        if (asking) (void)l.receive();  // +OK
        Reply r = l.receive();
        if (pass == 1 || !detail::unknown_script(r)) return r;
        detail::send_source(script, args);
      }
    } catch (const StoreError&) {
      drop(l);
      throw;
    }
  }

  // The node serving `slot`; reads the map first when it is stale.
  detail::Address node_for(std::uint16_t slot) {
    if (map_.empty() || stale_) refresh_slots();
    std::optional<detail::Address> node = map_.owner(slot);
    if (!node) {
      refresh_slots();
      node = map_.owner(slot);
      if (!node) throw detail::no_owner(where(), slot);
    }
    return std::move(*node);
  }
  // The link of the node serving `slot`.
  detail::Link& route(std::uint16_t slot) { return link(node_for(slot)); }

  // The open link to `a`, opened now if there is none (or it broke).
  detail::Link& link(const detail::Address& a) {
    const std::string name = a.text();
    auto it = links_.find(name);
    if (it != links_.end() && !it->second->broken()) return *it->second;
    if (it != links_.end()) links_.erase(it);
    try {
      return *links_.emplace(name, std::make_unique<detail::Link>(params_, a)).first->second;
    } catch (const StoreError&) {
      stale_ = true;  // the node may be gone: a replica may serve its slots by now
      throw;
    }
  }

  // Forgets a link that failed (single server: the session is broken until reconnect()).
  void drop(detail::Link& l) noexcept {
    if (!cluster()) return;  // hiredis marked it broken; broken() tells the Pool
    stale_ = true;
    for (auto it = links_.begin(); it != links_.end(); ++it) {
      if (it->second.get() == &l) {
        links_.erase(it);
        return;
      }
    }
  }

  // Reads the slot map from the first node that answers: the nodes known from the last map,
  // then the seeds.
  void refresh_slots() {
    std::optional<StoreError> last;
    for (const detail::Address& a : map_.candidates(seeds_)) {
      try {
        detail::Link& l = link(a);
        map_.read(l.command({"CLUSTER", "SLOTS"}), a);
        stale_ = false;
        return;
      } catch (const StoreError& e) {
        last = e;
      }
    }
    throw last ? *last : detail::no_node_answered(where());
  }

  ConnectionParams params_;
  std::vector<detail::Address> seeds_;
  std::unique_ptr<detail::Link> single_;  // a single server
  // A cluster: which node serves each slot, and the open links by address.
  detail::SlotMap map_;
  std::map<std::string, std::unique_ptr<detail::Link>> links_;
  bool stale_ = false;
};

}  // namespace idem::redis
