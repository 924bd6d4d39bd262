-- idem: the idempotency record table of the MySQL / MariaDB backend (InnoDB), layout 2.
-- The same statement idem::mysql::Store::ensure_schema() (and ensure_schema(MYSQL*)) runs:
-- the output of idem::mysql::record_table_ddl("`idempotent_record`"), for DBAs who create it
-- by hand.
-- The table name is configurable (idem::mysql::StoreParams::table, optionally
-- schema.table); if you pick another one, rename the table below to match.
-- DATETIME(3) columns hold UTC: idem's SQL writes and compares UTC_TIMESTAMP(3), whatever
-- the session's time_zone (idem sets none).
-- status 3 (outcome unknown) is never purged; an idem binary older than layout 2 refuses such
-- a row as CorruptRecord (and runs nothing).
--
-- Upgrading a table an older idem created (layout 1: no recovery_points, repair_reason,
-- repaired_at). ensure_schema() does it when the columns are missing; by hand, on MariaDB
-- (instant: no rows are copied; WAIT: give up on the metadata lock after 2 s rather than
-- hold up every claim behind a long transaction, and run it again):
--
--   ALTER TABLE `idempotent_record` WAIT 2
--     ADD COLUMN IF NOT EXISTS recovery_points MEDIUMBLOB NULL COMMENT 'JSON object: step name -> result of the finished steps',
--     ADD COLUMN IF NOT EXISTS repair_reason VARBINARY(512) NULL COMMENT 'UTF-8: why the last repair was made',
--     ADD COLUMN IF NOT EXISTS repaired_at DATETIME(3) NULL COMMENT 'UTC; when the last repair was made',
--     MODIFY COLUMN status TINYINT NOT NULL DEFAULT 0 COMMENT '0 processing, 1 succeeded, 2 failed, 3 outcome unknown',
--     COMMENT='idem layout=2 oldest_reader=2',
--     ALGORITHM=INSTANT;
--
-- On MySQL 8: the same without IF NOT EXISTS, WAIT and the MODIFY line. Upgrade the table
-- before the new idem runs on it: a new idem reads the new columns and fails on a table
-- without them.
--
-- The table comment is idem's layout stamp: the table's layout and the oldest layout of idem
-- that may use it. idem reads it when it checks the table and refuses a table that a newer
-- idem took beyond its reach; keep it when you alter the table (a table without it is judged
-- by its columns, and `idem schema migrate` stamps it again).
CREATE TABLE IF NOT EXISTS `idempotent_record` (
  idempotent_key    VARBINARY(64)    NOT NULL COMMENT 'the business id of the action, byte-exact',
  biz_type          VARBINARY(32)    NOT NULL COMMENT 'business domain: PAY, REFUND, ORDER, ...',
  status            TINYINT          NOT NULL DEFAULT 0 COMMENT '0 processing, 1 succeeded, 2 failed, 3 outcome unknown',
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
  recovery_points   MEDIUMBLOB       NULL COMMENT 'JSON object: step name -> result of the finished steps',
  repair_reason     VARBINARY(512)   NULL COMMENT 'UTF-8: why the last repair was made',
  repaired_at       DATETIME(3)      NULL COMMENT 'UTC; when the last repair was made',
  PRIMARY KEY (idempotent_key, biz_type),
  KEY idx_expire (expire_at),
  KEY idx_stale (status, lease_until)
) ENGINE=InnoDB COMMENT='idem layout=2 oldest_reader=2';
