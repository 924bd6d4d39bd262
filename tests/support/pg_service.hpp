#pragma once
// The service's own PostgreSQL connection, as a service opens it with libpq: a raw PGconn*,
// for the tests of idem on connections it does not own.
#include <libpq-fe.h>

#include <stdexcept>
#include <string>

#include "pg_server.hpp"

namespace idem_test {

struct ServiceConnection {
  PGconn* conn = PQconnectdb(pg_conninfo().c_str());
  ServiceConnection() {
    if (PQstatus(conn) != CONNECTION_OK) throw std::runtime_error(PQerrorMessage(conn));
  }
  ~ServiceConnection() { PQfinish(conn); }
  ServiceConnection(const ServiceConnection&) = delete;
  ServiceConnection& operator=(const ServiceConnection&) = delete;

  // The first value `sql` answers, read with libpq's blocking API ("(error) ..." if none).
  std::string text(const char* sql) const {
    PGresult* r = PQexec(conn, sql);
    std::string out = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0
                          ? std::string(PQgetvalue(r, 0, 0))
                          : std::string("(error) ") + PQerrorMessage(conn);
    PQclear(r);
    return out;
  }
  bool idle() const { return PQtransactionStatus(conn) == PQTRANS_IDLE; }
};

// What a session's SET statements changed: nothing, for a session idem has only borrowed.
inline constexpr const char* settings_set_by_session =
    "SELECT count(*) FROM pg_settings WHERE source = 'session'";

}  // namespace idem_test
