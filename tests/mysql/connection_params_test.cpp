// ConnectionParams' option file (idem/mysql/connection_params.hpp): Connector/C reads it when
// connecting, its values fill the fields the params leave empty, a field set in the params
// wins, and a file that cannot be read is a clear error before any connect.
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "../support/mysql_server.hpp"
#include "../support/temp_dir.hpp"

namespace {

// The params of a service that takes everything from the file.
idem::mysql::ConnectionParams from_file(const std::string& file) {
  idem::mysql::ConnectionParams p;
  p.option_file = file;
  p.host.clear();
  p.user.clear();
  p.port = 0;
  return p;
}

std::string current_database(const idem::mysql::ConnectionParams& p) {
  idem::mysql::Connection c(p);
  return std::string(c.select("SELECT DATABASE()", {}).at(0).at(0).text().value_or("NULL"));
}

}  // namespace

TEST_CASE("connection params: an option file fills what the params leave empty") {
  idem_test::TempDir dir;
  const auto server = idem_test::server();
  const std::string file = (dir / "idem.cnf").string();
  {
    std::ofstream out(file);
    out << "# the service's credentials\n[client]\nsocket = " << server.unix_socket
        << "\nuser = root\ndatabase = " << server.database
        << "\n\n[ops]\nsocket = " << server.unix_socket
        << "\nuser = root\ndatabase = information_schema\n";
  }
  CHECK(current_database(from_file(file)) == server.database);
  // Another group of the same file.
  auto ops = from_file(file);
  ops.option_group = "ops";
  CHECK(current_database(ops) == "information_schema");
  // A field of the params wins over the file's.
  auto mine = from_file(file);
  mine.database = "mysql";
  CHECK(current_database(mine) == "mysql");
  // A store works through it like through any params.
  auto pool =
      std::make_shared<idem::mysql::Pool>(from_file(file), idem::mysql::PoolParams{.size = 1});
  idem::mysql::Store store{pool, {.table = idem_test::unique_table("optfile")}};
  store.ensure_schema();
  CHECK(idem::run_once(store, idem::Key{"PAY", "from-file"}, "", [] { return 1; }));
  pool->acquire()->query("DROP TABLE " + store.table());
}

TEST_CASE("connection params: an option file that cannot be read fails before any connect") {
  idem_test::TempDir dir;
  const std::string missing = (dir / "nope.cnf").string();
  try {
    idem::mysql::Connection c(from_file(missing));
    FAIL("connected without the option file");
  } catch (const idem::StoreError& e) {
    CHECK_FALSE(e.retryable());
    CHECK_THAT(e.what(),
               Catch::Contains("cannot read the option file") && Catch::Contains(missing));
  }
  // Without an option file an empty field is passed as it is: nothing is read from elsewhere.
  idem::mysql::ConnectionParams plain = idem_test::server();
  plain.database.clear();
  CHECK(current_database(plain) == "NULL");
}
