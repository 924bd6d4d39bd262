#pragma once
// The idempotent_record table: its DDL and the validated, quoted table name.
//
// Key columns are VARBINARY so that they compare byte for byte: "abc" and "ABC", "a" and
// "a " are different keys (a _ci collation would merge the first pair, a PAD SPACE one the
// second). docs/schema.sql holds the same DDL for DBAs.

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/detail/identifier.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"

namespace idem::mysql {

// A table name by idem's identifier rule (idem/detail/identifier.hpp), optionally qualified
// as schema.table. Returns it quoted with backticks; throws InvalidArgument otherwise.
inline std::string quote_identifier(std::string_view name) {
  return idem::detail::quote_parts(
      idem::detail::split_identifier(name, "idem::mysql", "table name", true), '`');
}

// CREATE TABLE IF NOT EXISTS for the record table under the given (already quoted) name.
inline std::string record_table_ddl(std::string_view quoted_table) {
  return fmt::format(R"(CREATE TABLE IF NOT EXISTS {} (
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
) ENGINE=InnoDB)",
                     quoted_table);
}

}  // namespace idem::mysql
