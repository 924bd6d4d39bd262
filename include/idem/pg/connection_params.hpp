#pragma once
// idem::pg::ConnectionParams: how idem::pg opens a connection (idem/pg/connection.hpp).

#include <chrono>
#include <string>

namespace idem::pg {

struct ConnectionParams {
  // A libpq connection string or URI, as the service already has one: "host=/run/postgresql
  // dbname=app user=app" or "postgresql://app@db1,db2/app?target_session_attrs=read-write"
  // (several hosts, the primary found by libpq: what a failover needs).
  std::string conninfo;
  // How long opening a connection may take, all of conninfo's hosts together (libpq's
  // connect_timeout: whole seconds, at least 2, 0 for no limit); conninfo's own wins.
  std::chrono::seconds connect_timeout{10};
  // The application_name the server shows in pg_stat_activity; conninfo's own wins.
  std::string application_name = "idem";
  // Prepare each statement once per connection and run it by name (the server skips parsing
  // and planning it again). false: every statement is sent with its text, as on the service's
  // own connections; needed behind a pooler that does not keep a session's prepared
  // statements (PgBouncer in transaction mode before 1.21).
  bool prepared_statements = true;
  // The server cancels a statement of idem's connections that runs longer (SQLSTATE 57014:
  // retryable, so the store tries again under its RetryPolicy); set once per connection, so it
  // bounds the service's own statements on idem's pool connections (with_transaction) too.
  // 0: the server's setting (the role's or database's statement_timeout). The service's own
  // connections are left as they are. A network that drops packets silently is libpq's to
  // notice: tcp_user_timeout and keepalives_idle in conninfo.
  std::chrono::milliseconds statement_timeout{30'000};
};

}  // namespace idem::pg
