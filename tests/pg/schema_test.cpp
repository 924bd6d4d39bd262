// The check of a PostgreSQL record table (idem/pg/schema_check.hpp): the table ensure_schema
// creates passes and carries layout 2's stamp; every way a DBA's table can differ is named with
// the statement that fixes it, and a store refuses to claim on it.
#include <string>

#include <catch2/catch.hpp>

#include <idem/pg.hpp>

#include "../support/pg_server.hpp"

namespace {

// The problems check_schema names, as one text.
std::string pg_problems_of(idem::pg::Store& store) {
  try {
    store.check_schema();
  } catch (const idem::SchemaMismatch& e) {
    return e.what();
  }
  return "none";
}

}  // namespace

TEST_CASE("pg schema: the table ensure_schema creates passes, stamped with layout 2") {
  idem_test::PgTable t;
  const idem::TableLayout layout = t.store.check_schema();
  CHECK(layout.layout == 2);
  CHECK(layout.oldest_reader == 2);
  CHECK(layout.stamped);
}

TEST_CASE("pg schema: a table that does not exist fails the first claim, before any write") {
  auto pool = idem_test::make_pg_pool(1);
  idem::pg::Store store(pool, {.table = idem_test::unique_pg_table("missing")});
  CHECK_THROWS_AS(store.claim(idem::Key{"PAY", "k"}, "", {}), idem::SchemaMismatch);
  CHECK(pg_problems_of(store).find("does not exist") != std::string::npos);
}

TEST_CASE("pg schema: keys that do not compare byte for byte are named with their fix") {
  idem_test::PgTable t;
  auto c = t.pool->acquire();
  c->query("ALTER TABLE " + t.store.table() + " ALTER COLUMN idempotent_key TYPE text COLLATE " +
           "\"default\"");
  const std::string problems = pg_problems_of(t.store);
  CHECK(problems.find("column idempotent_key has collation \"default\", idem expects \"c\"") !=
        std::string::npos);
  CHECK(problems.find("ALTER COLUMN idempotent_key TYPE text COLLATE \"C\"") != std::string::npos);
  // The fix the message names makes the table pass again.
  c->query("ALTER TABLE " + t.store.table() +
           " ALTER COLUMN idempotent_key TYPE text COLLATE \"C\", ALTER COLUMN idempotent_key SET "
           "NOT NULL");
  CHECK(pg_problems_of(t.store) == "none");
}

TEST_CASE("pg schema: a missing column, a wrong type and nullability are each named") {
  idem_test::PgTable t;
  auto c = t.pool->acquire();
  c->query("ALTER TABLE " + t.store.table() + " DROP COLUMN repair_reason");
  c->query("ALTER TABLE " + t.store.table() + " ALTER COLUMN fence TYPE integer");
  c->query("ALTER TABLE " + t.store.table() + " ALTER COLUMN owner_token DROP NOT NULL");
  const std::string problems = pg_problems_of(t.store);
  CHECK(problems.find("column repair_reason is missing") != std::string::npos);
  CHECK(problems.find("ADD COLUMN repair_reason text NULL") != std::string::npos);
  CHECK(problems.find("column fence is integer, idem expects bigint") != std::string::npos);
  CHECK(problems.find("column owner_token is NULL, idem expects NOT NULL") != std::string::npos);
}

TEST_CASE("pg schema: an index that cannot serve the purge (missing, or partial) is named") {
  idem_test::PgTable t;
  auto c = t.pool->acquire();
  c->query("DROP INDEX \"" + t.name + "_idx_expire\"");
  CHECK(pg_problems_of(t.store).find("no index leads with (expire_at)") != std::string::npos);
  c->query("CREATE INDEX \"" + t.name + "_partial\" ON " + t.store.table() +
           " (expire_at) WHERE status = 1");
  CHECK(pg_problems_of(t.store).find("no index leads with (expire_at)") != std::string::npos);
  // Under any name, an index that leads with the column serves.
  c->query("CREATE INDEX \"" + t.name + "_mine\" ON " + t.store.table() + " (expire_at, status)");
  CHECK(pg_problems_of(t.store) == "none");
}

TEST_CASE("pg schema: a table a newer idem migrated beyond this one's reach is refused") {
  idem_test::PgTable t;
  t.pool->acquire()->query("COMMENT ON TABLE " + t.store.table() +
                           " IS 'idem layout=3 oldest_reader=3'");
  CHECK_THROWS_AS(t.store.check_schema(), idem::SchemaMismatch);
  // A comment of the DBA's own is no stamp: the table is judged by its columns.
  t.pool->acquire()->query("COMMENT ON TABLE " + t.store.table() + " IS 'payments dedup'");
  const idem::TableLayout layout = t.store.check_schema();
  CHECK(layout.layout == 2);
  CHECK_FALSE(layout.stamped);
}
