// The store conformance suite on idem::mysql::Store against the real MariaDB server. Time
// comes from the server's clock, so advance() sleeps.
#include <chrono>
#include <thread>
#include <tuple>

#include "../support/mysql_server.hpp"

namespace {

struct MysqlFixture {
  idem_test::Table table;
  idem::mysql::Store& store() { return table.store; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

// The same store claiming with a plain INSERT and a read-back, as on servers without
// INSERT ... RETURNING (MySQL, MariaDB before 10.5).
struct MysqlReadBackFixture {
  idem_test::Table table{8, idem::mysql::StoreParams{.insert_returning = false}};
  idem::mysql::Store& store() { return table.store; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<MysqlFixture, MysqlReadBackFixture>
#include <idem/testing/conformance.hpp>
