#pragma once
// A Redis Cluster's routing without I/O, for the blocking Connection and the coroutine
// AsyncConnection: which node serves each hash slot (read from a CLUSTER SLOTS reply, changed
// by a MOVED reply), and what an error reply asks of the session (follow MOVED, follow ASK once
// after ASKING, send the script's source after NOSCRIPT). Each driver sends its own round trips.

#include <cstddef>
#include <cstdint>
#include <optional>
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
#include "idem/redis/errors.hpp"
#include "idem/redis/reply.hpp"

namespace idem::redis::detail {

// Redirections a session follows for one call before the last one's error stands (it is
// retryable: the slot is still moving).
inline constexpr int max_redirections = 5;

// The slot of a script call: that of its first key (every key of an idem script shares its
// hash tag), or 0 for a call without keys.
inline std::uint16_t call_slot(const ScriptCall& call) noexcept {
  return call.keys.empty() ? 0 : key_slot(call.keys.front());
}

// What an error reply of a node asks the session to do next.
struct Redirect {
  enum Kind { none, moved, ask };
  Kind kind = none;
  Address to;  // where MOVED or ASK points

  // `r` as the node at `from` answered it.
  static Redirect of(const ReplyView& r, const Address& from) {
    if (!r.is_error()) return {};
    const std::string_view text = r.text();
    const std::string_view name = error_name(text);
    if (name != "MOVED" && name != "ASK") return {};
    // "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>"; an empty host (a node that
    // does not know its own name for clients) is the host that answered.
    std::string_view target = text.substr(text.rfind(' ') + 1);
    std::string with_host;
    if (target.starts_with(':') && target.find(':', 1) == std::string_view::npos) {
      target = with_host = from.host + std::string(target);
    }
    return {name == "MOVED" ? moved : ask, Address::parse(target)};
  }
};

class SlotMap {
 public:
  bool empty() const noexcept { return owners_.empty(); }

  // The master serving `slot`; none when the map has no node for it.
  std::optional<Address> owner(std::uint16_t slot) const {
    if (owners_.empty() || owners_[slot] == no_node) return std::nullopt;
    return nodes_[owners_[slot]];
  }

  // Every node seen (masters of past and present maps), then `seeds`: where to ask for a map.
  std::vector<Address> candidates(const std::vector<Address>& seeds) const {
    std::vector<Address> out = nodes_;
    out.insert(out.end(), seeds.begin(), seeds.end());
    return out;
  }

  // Replaces the map with a CLUSTER SLOTS reply of the node at `answered_by` (a master given
  // with an empty host is that node). Throws StoreError on a reply of another shape.
  void read(const ReplyView& slots, const Address& answered_by) {
    std::vector<std::uint16_t> owners(slot_count, no_node);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const ReplyView range = slots[i];
      const ReplyView master = range[2];
      std::string host(master[0].text());
      if (host.empty()) host = answered_by.host;
      const auto port = static_cast<unsigned>(master[1].integer());
      const std::uint16_t node = index_of(Address{std::move(host), port, {}});
      for (std::int64_t s = range[0].integer(); s <= range[1].integer(); ++s) {
        if (s >= 0 && s < slot_count) owners[static_cast<std::size_t>(s)] = node;
      }
    }
    owners_ = std::move(owners);
  }

  // MOVED: `slot` is served by `a` from now on.
  void moved(std::uint16_t slot, const Address& a) {
    if (owners_.empty()) owners_.assign(slot_count, no_node);
    owners_[slot] = index_of(a);
  }

 private:
  static constexpr std::uint16_t no_node = 0xffff;

  std::uint16_t index_of(const Address& a) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].host == a.host && nodes_[i].port == a.port)
        return static_cast<std::uint16_t>(i);
    }
    nodes_.push_back(a);
    return static_cast<std::uint16_t>(nodes_.size() - 1);
  }

  std::vector<Address> nodes_;         // every node seen
  std::vector<std::uint16_t> owners_;  // per slot, an index into nodes_, or no_node
};

// The retryable error of a slot no node of the map serves (the cluster lost a master).
inline StoreError no_owner(std::string_view where, std::uint16_t slot) {
  return StoreError(fmt::format("idem::redis: no node of the {} serves slot {}", where, slot), true,
                    Diagnostics{0, "", "CLUSTERDOWN no node serves the slot", true});
}

// Where a session goes, for messages: the single server's socket path or host:port, or
// "cluster" and the seed nodes (`seeds`, parsed from params.cluster_nodes).
inline std::string session_text(const ConnectionParams& params, const std::vector<Address>& seeds) {
  if (seeds.empty()) return Address{params.host, params.port, params.unix_socket}.text();
  std::string out = "cluster";
  for (const Address& a : seeds)
    out += " " + a.text();
  return out;
}

// The retryable error of a map reading that no node answered, when none said why.
inline StoreError no_node_answered(std::string_view where) {
  return StoreError(fmt::format("idem::redis: no node of the {} answered", where), true);
}

}  // namespace idem::redis::detail
