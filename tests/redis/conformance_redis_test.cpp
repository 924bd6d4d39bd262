// The store conformance suite on idem::redis::Store against the real redis-server. Time comes
// from the server's clock, so advance() sleeps.
#include <chrono>
#include <thread>
#include <tuple>

#include "../support/redis_server.hpp"

namespace {

// Stamped (ensure_schema): records packed in one string, as a new deployment keeps them.
struct RedisFixture {
  idem_test::RedisStore s;
  RedisFixture() { s.store.ensure_schema(); }
  idem::redis::Store& store() { return s.store; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

// One bucket: every record and both indexes in one slot, as with a layout of few buckets; not
// stamped, so records are the hashes of layout 1, as a deployment upgraded from it keeps them
// until it is stamped.
struct RedisOneBucketFixture {
  idem_test::RedisStore s{8, idem::redis::StoreParams{.buckets = 1}};
  idem::redis::Store& store() { return s.store; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<RedisFixture, RedisOneBucketFixture>
#include <idem/testing/conformance.hpp>
