-- idem: the idempotency record table of the MySQL / MariaDB backend (InnoDB).
-- The same statement idem::mysql::Store::ensure_schema() (and ensure_schema(MYSQL*)) runs:
-- the output of idem::mysql::record_table_ddl("`idempotent_record`"), for DBAs who create it
-- by hand.
-- The table name is configurable (idem::mysql::StoreParams::table, optionally
-- schema.table); if you pick another one, rename the table below to match.
-- DATETIME(3) columns hold UTC: idem's SQL writes and compares UTC_TIMESTAMP(3), whatever
-- the session's time_zone (idem sets none).
CREATE TABLE IF NOT EXISTS `idempotent_record` (
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
) ENGINE=InnoDB;
