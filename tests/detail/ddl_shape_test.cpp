// ddl_shape(): the expected table read back from a DDL text in idem's layout, the reference of
// the stores' schema checks.
#include <catch2/catch.hpp>

#include <idem/detail/ddl_shape.hpp>

TEST_CASE("ddl_shape reads columns, types, collations, nullability, keys and CREATE INDEX") {
  const auto shape = idem::detail::ddl_shape(R"(CREATE TABLE IF NOT EXISTS `t` (
  idempotent_key    VARBINARY(64)    NOT NULL COMMENT 'the key, byte-exact',
  fence             BIGINT UNSIGNED  NOT NULL DEFAULT 1 COMMENT 'bumped, by every claim',
  owner_token       CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'token',
  response_snapshot MEDIUMBLOB       NULL COMMENT 'JSON',
  biz_type          TEXT COLLATE BINARY NOT NULL,  -- business domain, SQLite style
  PRIMARY KEY (idempotent_key, biz_type),
  KEY idx_expire (expire_at)
) ENGINE=InnoDB;
CREATE INDEX IF NOT EXISTS "main"."t_idx_stale" ON "t" (status, lease_until);
)");
  REQUIRE(shape.columns.size() == 5);
  CHECK(shape.columns[0].name == "idempotent_key");
  CHECK(shape.columns[0].type == "varbinary(64)");
  CHECK_FALSE(shape.columns[0].nullable);
  CHECK(shape.columns[0].line == "VARBINARY(64) NOT NULL");
  CHECK(shape.columns[1].type == "bigint unsigned");
  CHECK(shape.columns[1].line == "BIGINT UNSIGNED NOT NULL DEFAULT 1");
  CHECK(shape.columns[2].type == "char(32)");
  CHECK(shape.columns[2].collation == "ascii_bin");
  CHECK(shape.columns[3].type == "mediumblob");
  CHECK(shape.columns[3].nullable);
  CHECK(shape.columns[4].type == "text");
  CHECK(shape.columns[4].collation == "binary");
  REQUIRE(shape.indexes.size() == 3);
  CHECK(shape.indexes[0].name == "PRIMARY");
  CHECK(shape.indexes[0].columns == std::vector<std::string>{"idempotent_key", "biz_type"});
  CHECK(shape.indexes[1].name == "idx_expire");
  CHECK(shape.indexes[1].columns == std::vector<std::string>{"expire_at"});
  CHECK(shape.indexes[2].name == "t_idx_stale");
  CHECK(shape.indexes[2].columns == std::vector<std::string>{"status", "lease_until"});
}
