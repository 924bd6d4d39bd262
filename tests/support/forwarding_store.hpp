#pragma once
// idem_test::ForwardingStore: a Store that passes every call to a MemoryStore, for the tests
// that make some operations fail as a database would. Derive from it and declare only the
// operations that fail: each hides the forwarding one of the same name.
#include <cstddef>
#include <optional>
#include <string_view>

#include <idem/memory_store.hpp>

namespace idem_test {

struct ForwardingStore {
  idem::MemoryStore& inner;
  idem::ClaimResult claim(const idem::Key& k, std::string_view fp, const idem::Options& o) {
    return inner.claim(k, fp, o);
  }
  void complete(const idem::Key& k, const idem::Ticket& t, std::string_view s) {
    inner.complete(k, t, s);
  }
  void fail(const idem::Key& k, const idem::Ticket& t, std::string_view s, bool r) {
    inner.fail(k, t, s, r);
  }
  std::optional<idem::Record> find(const idem::Key& k) { return inner.find(k); }
  std::size_t purge_expired(std::size_t b, std::size_t m) { return inner.purge_expired(b, m); }
  std::size_t release_stale(std::size_t b) { return inner.release_stale(b); }
};

}  // namespace idem_test
