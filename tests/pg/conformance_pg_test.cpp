// The store conformance suite on idem::pg::Store against a real PostgreSQL server. Time comes
// from the server's clock, so advance() sleeps.
#include <chrono>
#include <thread>
#include <tuple>

#include <idem/cached_store.hpp>

#include "../support/pg_server.hpp"

namespace {

struct PgFixture {
  idem_test::PgTable table;
  idem::pg::Store& store() { return table.store; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

// One pooled connection: every thread of the suite queues for it.
struct PgSingleConnectionFixture {
  idem_test::PgTable table{1};
  idem::pg::Store& store() { return table.store; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

// idem::CachedStore in front of the PostgreSQL store: the cache judges expiry by this
// process's clock, the store by the server's.
struct PgCachedFixture {
  idem_test::PgTable table;
  idem::CachedStore<idem::pg::Store> cached{table.store};
  idem::CachedStore<idem::pg::Store>& store() { return cached; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<PgFixture, PgSingleConnectionFixture, PgCachedFixture>
#include <idem/testing/conformance.hpp>
