// The store conformance suite on idem::redis::Store against the real redis-server. Time comes
// from the server's clock, so advance() sleeps.
#include <chrono>
#include <thread>
#include <tuple>

#include "../support/redis_server.hpp"

namespace {

struct RedisFixture {
  idem_test::RedisStore s;
  idem::redis::Store& store() { return s.store; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

// One bucket: every record and both indexes in one slot, as with a layout of few buckets.
struct RedisOneBucketFixture {
  idem_test::RedisStore s{8, idem::redis::StoreParams{.buckets = 1}};
  idem::redis::Store& store() { return s.store; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<RedisFixture, RedisOneBucketFixture>
#include <idem/testing/conformance.hpp>
