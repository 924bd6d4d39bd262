// The store conformance suite on MemoryStore, with a manual clock: no test sleeps for time.
#include <tuple>

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

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<MemoryFixture, SingleShardFixture>
#include <idem/testing/conformance.hpp>
