// The store conformance suite on idem::sqlite::Store: a fresh database file per test case and
// a manual clock, so no test sleeps for a lease or a ttl to run out.
#include <tuple>

#include "../support/sqlite_file.hpp"

namespace {

struct SqliteFixture {
  idem_test::TempDir dir;
  idem::ManualClock clock;
  idem::sqlite::Store sqlite{dir / "conformance.db",
                             idem::sqlite::StoreParams{.clock = [this] { return clock.now(); }}};

  idem::sqlite::Store& store() { return sqlite; }
  void advance(idem::Duration d) { clock.advance(d); }
};

// One pooled connection: every thread of the suite queues for it, and the statement cache
// is shared by all operations.
struct SingleConnectionFixture {
  idem_test::TempDir dir;
  idem::ManualClock clock;
  idem::sqlite::Store sqlite{dir / "conformance.db",
                             idem::sqlite::StoreParams{.table = "main.idem_one_connection",
                                                       .clock = [this] { return clock.now(); },
                                                       .pool_size = 1}};

  idem::sqlite::Store& store() { return sqlite; }
  void advance(idem::Duration d) { clock.advance(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<SqliteFixture, SingleConnectionFixture>
#include <idem/testing/conformance.hpp>
