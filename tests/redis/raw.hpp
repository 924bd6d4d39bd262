#pragma once
// What the Redis tests look at behind the store's back: commands on a connection of the test's
// own, and where the store keeps a record and its bucket's indexes (detail/layout.hpp).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <idem/redis.hpp>

#include "../support/redis_server.hpp"

namespace idem_test {

// A command on the test thread's own connection to the fixture's server.
inline idem::redis::Reply raw(std::initializer_list<std::string_view> args) {
  thread_local idem::redis::Connection c(redis_server());
  if (c.broken()) c.reconnect();
  return c.command(args);
}

inline std::string member_of(const idem::Key& key) {
  return idem::redis::detail::Layout::member(key);
}

inline idem::redis::detail::RecordKeys keys_of(const idem::redis::Store& store,
                                               const idem::Key& key) {
  return store.ops().layout().keys(member_of(key));
}

inline std::string record_key(const idem::redis::Store& store, const idem::Key& key) {
  return keys_of(store, key).record;
}

// A time as the store writes it: milliseconds since the epoch, in decimal.
inline std::string ms_text(idem::TimePoint t) {
  return std::to_string(t.time_since_epoch().count());
}

}  // namespace idem_test
