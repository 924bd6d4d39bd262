// The store conformance suite on idem::mysql::AsyncStore (MariaDB's non-blocking API) against
// the real MariaDB server, through idem::testing::BlockingStore: the same cases as the
// blocking store's. Time comes from the server's clock, so advance() sleeps. And the coroutine
// store's migration of a table an older idem created.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <idem/mysql/async.hpp>
#include <idem/testing/blocking_store.hpp>

#include "../support/mysql_async.hpp"
#include "layout1_table.hpp"

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

TEST_CASE("async mysql: ensure_schema migrates a layout-1 table, whose old rows then decode") {
  idem_test::Layout1Table v1;
  v1.old_row("old-done", 1, R"({"paid":1})", 0, -60);
  v1.old_row("old-stale", 0, nullptr, 0, -5);
  boost::asio::io_context io;
  auto pool = std::make_shared<idem::mysql::AsyncPool>(idem_test::server(),
                                                       idem::mysql::PoolParams{.size = 2});
  idem::mysql::AsyncStore store{pool, {.table = v1.name}};

  const auto done = idem_test::run_on(io, store.ensure_schema());
  CHECK(done.added == std::vector<std::string>{"recovery_points", "repair_reason", "repaired_at"});
  CHECK(done.algorithm == "INSTANT");
  CHECK(idem_test::run_on(io, store.ensure_schema()).added.empty());  // nothing left to do

  const auto old_done = idem_test::run_on(io, store.find(idem::Key{"PAY", "old-done"}));
  REQUIRE(old_done);
  CHECK(old_done->snapshot == R"({"paid":1})");
  CHECK(old_done->recovery_points.empty());
  CHECK_FALSE(old_done->repaired_at.has_value());
  const auto stale =
      idem_test::run_on(io, store.claim(idem::Key{"PAY", "old-stale"}, "fp", idem::Options{}));
  CHECK(stale.verdict == idem::Verdict::acquired);
  CHECK(stale.after_crash);
  // The blocking store sees the same table.
  idem::mysql::Store blocking{v1.pool, {.table = v1.name}};
  CHECK(blocking.find(idem::Key{"PAY", "old-stale"}) == stale.record);
}
