// The store conformance suite on MemoryStore, and on idem::CachedStore in front of one, with a
// manual clock: no test sleeps for time.
#include <tuple>

#include <idem/cached_store.hpp>
#include <idem/memory_store.hpp>

namespace {

struct MemoryFixture {
  idem::ManualClock clock;
  idem::MemoryStore memory{[this] { return clock.now(); }};

  idem::MemoryStore& store() { return memory; }
  void advance(idem::Duration d) { clock.advance(d); }
};

// Few shards, so that keys share locks and the suite exercises contention between them.
struct SingleShardFixture {
  idem::ManualClock clock;
  idem::MemoryStore memory{
      idem::MemoryStoreParams{.clock = [this] { return clock.now(); }, .shards = 1}};

  idem::MemoryStore& store() { return memory; }
  void advance(idem::Duration d) { clock.advance(d); }
};

// idem::CachedStore in front of a MemoryStore, on the same clock: the cache must answer every
// case as the store behind it does.
struct CachedFixture {
  idem::ManualClock clock;
  idem::MemoryStore memory{[this] { return clock.now(); }};
  idem::CachedStore<idem::MemoryStore> cached{
      memory, idem::CacheParams{.clock = [this] { return clock.now(); }}};

  idem::CachedStore<idem::MemoryStore>& store() { return cached; }
  void advance(idem::Duration d) { clock.advance(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<MemoryFixture, SingleShardFixture, CachedFixture>
#include <idem/testing/conformance.hpp>
