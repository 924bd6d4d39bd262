// The store conformance suite on idem::mysql::Store against the real MariaDB server. Time
// comes from the server's clock, so advance() sleeps.
#include <chrono>
#include <thread>
#include <tuple>

#include <idem/cached_store.hpp>

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

// idem::CachedStore in front of the MySQL store: the cache judges expiry by this process's
// clock, the store by the server's.
struct MysqlCachedFixture {
  idem_test::Table table;
  idem::CachedStore<idem::mysql::Store> cached{table.store};
  idem::CachedStore<idem::mysql::Store>& store() { return cached; }
  void advance(idem::Duration d) { std::this_thread::sleep_for(d); }
};

}  // namespace

#define IDEM_CONFORMANCE_FIXTURES std::tuple<MysqlFixture, MysqlReadBackFixture, MysqlCachedFixture>
#include <idem/testing/conformance.hpp>
