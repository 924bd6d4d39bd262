// The store conformance suite on idem::pg::Store, and on idem::pg::AsyncStore (libpq's
// asynchronous API, through idem::testing::BlockingStore), against a real PostgreSQL server.
// Time comes from the server's clock, so advance() sleeps.
#include <chrono>
#include <thread>
#include <tuple>

#include <idem/cached_store.hpp>
#include <idem/testing/blocking_store.hpp>

#include "../support/pg_async.hpp"
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

// The coroutine store, each operation run to its end on a loop of its own.
struct PgAsyncFixture {
  idem_test::PgAsyncTable table;
  idem::testing::BlockingStore<idem::pg::AsyncStore> blocking{table.store};
  idem::testing::BlockingStore<idem::pg::AsyncStore>& store() { return blocking; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES \
  std::tuple<PgFixture, PgSingleConnectionFixture, PgCachedFixture, PgAsyncFixture>
#include <idem/testing/conformance.hpp>
