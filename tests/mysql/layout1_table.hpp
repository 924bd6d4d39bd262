#pragma once
// The record table of an older idem (layout 1) with rows it wrote: what the migration tests of
// the blocking and the coroutine store start from.
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <idem/mysql.hpp>

#include "../support/mysql_server.hpp"

namespace idem_test {

// The record table exactly as idem created it before layout 2 (record_table_ddl at a867c37):
// the fixture the migration must take as it is.
inline constexpr std::string_view layout1_ddl = R"(CREATE TABLE IF NOT EXISTS {} (
  idempotent_key    VARBINARY(64)    NOT NULL COMMENT 'the business id of the action, byte-exact',
  biz_type          VARBINARY(32)    NOT NULL COMMENT 'business domain: PAY, REFUND, ORDER, ...',
  status            TINYINT          NOT NULL DEFAULT 0 COMMENT '0 processing, 1 succeeded, 2 failed',
  fence             BIGINT UNSIGNED  NOT NULL DEFAULT 1 COMMENT 'bumped by every claim and takeover',
  owner_token       CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'random token of the current claim',
  request_hash      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' COMMENT 'request fingerprint',
  response_snapshot MEDIUMBLOB       NULL COMMENT 'JSON: the response (succeeded) or the error (failed)',
  retryable         TINYINT          NOT NULL DEFAULT 0 COMMENT 'failed records: may a duplicate run again',
  attempts          INT UNSIGNED     NOT NULL DEFAULT 1,
  lease_until       DATETIME(3)      NOT NULL COMMENT 'UTC; a processing claim is honoured until then',
  created_at        DATETIME(3)      NOT NULL COMMENT 'UTC',
  updated_at        DATETIME(3)      NOT NULL COMMENT 'UTC',
  expire_at         DATETIME(3)      NOT NULL COMMENT 'UTC; purged after this',
  PRIMARY KEY (idempotent_key, biz_type),
  KEY idx_expire (expire_at),
  KEY idx_stale (status, lease_until)
) ENGINE=InnoDB)";

// A layout-1 table with rows an older idem wrote, dropped at the end.
struct Layout1Table {
  std::shared_ptr<idem::mysql::Pool> pool = idem_test::make_pool(16);
  std::string name = idem_test::unique_table("v1");
  std::string quoted = "`" + name + "`";

  Layout1Table() { pool->acquire()->query(fmt::format(layout1_ddl, quoted)); }
  ~Layout1Table() {
    try {
      pool->acquire()->query("DROP TABLE IF EXISTS " + quoted);
    } catch (...) {
    }
  }
  Layout1Table(const Layout1Table&) = delete;
  Layout1Table& operator=(const Layout1Table&) = delete;

  // A row as the old idem wrote it: its 13 columns; times relative to the server's now.
  void old_row(const std::string& id, int status, const char* snapshot, int retryable,
               int lease_seconds, int attempts = 1) {
    pool->acquire()->execute(
        "INSERT INTO " + quoted +
            " (idempotent_key, biz_type, status, fence, owner_token, request_hash, "
            "response_snapshot, retryable, attempts, lease_until, created_at, updated_at, "
            "expire_at) VALUES (?, 'PAY', ?, ?, ?, 'fp', ?, ?, ?, UTC_TIMESTAMP(3) + INTERVAL ? "
            "SECOND, UTC_TIMESTAMP(3) - INTERVAL 1 MINUTE, UTC_TIMESTAMP(3) - INTERVAL 1 MINUTE, "
            "UTC_TIMESTAMP(3) + INTERVAL 1 DAY)",
        {id, status, attempts, std::string(32, 'a'),
         snapshot == nullptr ? idem::mysql::Param(nullptr) : idem::mysql::Param::blob(snapshot),
         retryable, attempts, lease_seconds});
  }

  std::string create_table() {
    const auto rows = pool->acquire()->select("SHOW CREATE TABLE " + quoted, {});
    return std::string(*rows.at(0).at(1).text());
  }
};

}  // namespace idem_test
