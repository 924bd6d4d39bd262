// idem/mysql/detail/statement_run.hpp: what follows each answer of Connector/C when a prepared
// statement runs, for the blocking and the non-blocking connection alike (no server needed;
// tests/mysql/ runs both connections against one).
#include <catch2/catch.hpp>

#include <string>

#include <idem/mysql/detail/statement_run.hpp>

using Next = idem::mysql::detail::StatementRun::Next;

namespace {

constexpr unsigned need_reprepare = 1615;  // ER_NEED_REPREPARE

idem::mysql::detail::StatementRun statement_run_of(const std::string& sql,
                                                   idem::mysql::detail::ParamBinds& binds) {
  return idem::mysql::detail::StatementRun(sql, nullptr, 0, binds);
}

}  // namespace

TEST_CASE("StatementRun: an execute that succeeded is done") {
  const std::string sql = "SELECT 1";
  idem::mysql::detail::ParamBinds binds;
  auto run = statement_run_of(sql, binds);
  CHECK(run.executed(0, 0) == Next::done);
}

TEST_CASE("StatementRun: a table changed under the statement prepares it again - once") {
  const std::string sql = "SELECT 1";
  idem::mysql::detail::ParamBinds binds;
  auto run = statement_run_of(sql, binds);
  CHECK(run.executed(1, need_reprepare) == Next::prepare_again);
  CHECK(run.executed(1, need_reprepare) == Next::fail);
  auto again = statement_run_of(sql, binds);
  CHECK(again.executed(1, need_reprepare) == Next::prepare_again);
  CHECK(again.executed(0, 0) == Next::done);
}

TEST_CASE("StatementRun: any other failed execute fails - also a lost connection") {
  const std::string sql = "INSERT INTO t VALUES (1)";
  idem::mysql::detail::ParamBinds binds;
  for (const unsigned error : {1062u, 1213u, 1205u, 2006u, 2013u}) {
    auto run = statement_run_of(sql, binds);
    CHECK(run.executed(1, error) == Next::fail);
  }
}

TEST_CASE(
    "reset_after_failed_result: a statement left mid-result is reset unless the connection is "
    "lost") {
  using idem::mysql::detail::reset_after_failed_result;
  CHECK(reset_after_failed_result(1062));  // a duplicate key of INSERT ... RETURNING
  CHECK(reset_after_failed_result(1213));
  CHECK_FALSE(reset_after_failed_result(2006));
  CHECK_FALSE(reset_after_failed_result(2013));
  CHECK_FALSE(reset_after_failed_result(4031));
}

TEST_CASE("breaks_connection: a lost connection breaks it - a statement's own failure does not") {
  using idem::mysql::detail::breaks_connection;
  const auto coded = [](unsigned n) { return idem::mysql::make_error("execute", n, "HY000", "x"); };
  CHECK(breaks_connection(coded(2013)));
  CHECK(breaks_connection(coded(2006)));
  CHECK_FALSE(breaks_connection(coded(1062)));
  CHECK_FALSE(breaks_connection(coded(1213)));
}
