// The store conformance suite on idem::mysql::AsyncStore (MariaDB's non-blocking API) against
// the real MariaDB server, through idem::testing::BlockingStore: the same cases as the
// blocking store's. Time comes from the server's clock, so advance() sleeps.
#include <chrono>
#include <thread>
#include <tuple>

#include <idem/mysql/async.hpp>
#include <idem/testing/blocking_store.hpp>

#include "../support/mysql_async.hpp"

namespace {

struct MysqlAsyncFixture {
  idem_test::AsyncTable table;
  idem::testing::BlockingStore<idem::mysql::AsyncStore> blocking{table.store};
  idem::testing::BlockingStore<idem::mysql::AsyncStore>& store() { return blocking; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<MysqlAsyncFixture>
#include <idem/testing/conformance.hpp>
