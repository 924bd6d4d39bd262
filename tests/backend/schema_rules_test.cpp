// schema_problems(): the comparison of a live table with the one a store's DDL creates, the
// rules under every SQL store's check_schema().
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <idem/backend/schema_rules.hpp>

namespace {

using idem::backend::LiveColumn;
using idem::backend::LiveIndexColumn;

constexpr std::string_view ddl = R"(CREATE TABLE t (
  k    VARBINARY(64) NOT NULL,
  kind VARBINARY(32) NOT NULL,
  tok  CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  at   DATETIME(3) NOT NULL,
  note BLOB NULL,
  PRIMARY KEY (k, kind),
  KEY idx_expire (at)
))";

const idem::backend::SchemaDialect dialect{
    .comparable_type = [](std::string_view t) { return idem::detail::lower(t); },
    .modify = [](const std::string& q,
                 const idem::detail::DdlColumn& c) { return "MODIFY " + q + " " + c.name; },
    .primary_key = [](const std::string& q,
                      const std::string& cols) { return "PK " + q + " (" + cols + ")"; },
    .add_column = [](const std::string& q,
                     const idem::detail::DdlColumn& c) { return "ADD " + q + " " + c.name; },
    .create_index = [](const std::string& q,
                       const idem::detail::DdlIndex& i) { return "INDEX " + i.name + " ON " + q; },
    .create_fix = "create it",
    .later_columns = {"note"},
    .migrate_fix = "migrate it",
    .layout = "layout 2",
};

std::vector<LiveColumn> good_columns() {
  return {{"k", "varbinary(64)", "", false},
          {"kind", "varbinary(32)", "", false},
          {"tok", "char(32)", "ascii_bin", false},
          {"at", "datetime(3)", "", false},
          {"note", "blob", "", true}};
}

std::vector<LiveIndexColumn> good_indexes() {
  return {{"PRIMARY", "k"}, {"PRIMARY", "kind"}, {"idx_expire", "at"}};
}

std::vector<std::string> whats(const std::vector<LiveColumn>& columns,
                               const std::vector<LiveIndexColumn>& indexes) {
  std::vector<std::string> out;
  for (const auto& p : idem::backend::schema_problems(dialect, "`t`", ddl, columns, indexes))
    out.push_back(p.what);
  return out;
}

}  // namespace

TEST_CASE("schema_problems: the table as the DDL makes it, and a DBA's additions, pass") {
  CHECK(whats(good_columns(), good_indexes()).empty());
  auto columns = good_columns();
  columns.push_back({"extra", "int", "", true});
  auto indexes = good_indexes();
  indexes.push_back({"mine", "kind"});
  CHECK(whats(columns, indexes).empty());
  // idem's index under another name, with more columns after its own, still counts.
  indexes = {{"PRIMARY", "k"}, {"PRIMARY", "kind"}, {"by_time", "at"}, {"by_time", "kind"}};
  CHECK(whats(good_columns(), indexes).empty());
}

TEST_CASE("schema_problems: each difference is one problem with its dialect's fix") {
  SECTION("no table") {
    const auto problems = idem::backend::schema_problems(dialect, "`t`", ddl, {}, {});
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].fix == "create it");
  }
  SECTION("a key column of another type and a case-insensitive collation") {
    auto columns = good_columns();
    columns[0] = {"k", "varchar(64)", "utf8mb4_general_ci", false};
    const auto w = whats(columns, good_indexes());
    REQUIRE(w.size() == 1);
    CHECK_THAT(w[0], Catch::Contains("does not compare byte for byte"));
  }
  SECTION("another collation on a column that names one") {
    auto columns = good_columns();
    columns[2].collation = "ascii_general_ci";
    CHECK(whats(columns, good_indexes()) ==
          std::vector<std::string>{
              "column tok has collation ascii_general_ci, idem expects ascii_bin"});
  }
  SECTION("nullability, both ways") {
    auto columns = good_columns();
    columns[3].nullable = true;
    columns[4].nullable = false;
    CHECK(whats(columns, good_indexes()) ==
          std::vector<std::string>{"column at is NULL, idem expects NOT NULL",
                                   "column note is NOT NULL, idem expects NULL"});
  }
  SECTION("a missing column; a missing later column is a migration") {
    auto columns = good_columns();
    columns.erase(columns.begin() + 3);  // at
    columns.pop_back();                  // note, of a later layout
    const auto problems =
        idem::backend::schema_problems(dialect, "`t`", ddl, columns, good_indexes());
    REQUIRE(problems.size() == 2);
    CHECK(problems[0].what == "column at is missing");
    CHECK(problems[0].fix == "ADD `t` at");
    CHECK(problems[1].fix == "migrate it");
  }
  SECTION("another primary key") {
    const auto problems = idem::backend::schema_problems(dialect, "`t`", ddl, good_columns(),
                                                         {{"PRIMARY", "k"}, {"idx_expire", "at"}});
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].fix == "PK `t` (k, kind)");
  }
  SECTION("an index missing, or only on a prefix of its column") {
    for (const auto& indexes :
         {std::vector<LiveIndexColumn>{{"PRIMARY", "k"}, {"PRIMARY", "kind"}},
          std::vector<LiveIndexColumn>{
              {"PRIMARY", "k"}, {"PRIMARY", "kind"}, {"idx_expire", "at", true}}}) {
      const auto problems =
          idem::backend::schema_problems(dialect, "`t`", ddl, good_columns(), indexes);
      REQUIRE(problems.size() == 1);
      CHECK_THAT(problems[0].what,
                 Catch::Contains("no index leads with (at)") && Catch::Contains("purge_expired"));
      CHECK(problems[0].fix == "INDEX idx_expire ON `t`");
    }
  }
  SECTION("an index the database keeps but queries may not use (ignored, invisible)") {
    const std::vector<LiveIndexColumn> indexes{
        {"PRIMARY", "k"}, {"PRIMARY", "kind"}, {"by_time", "at", false, true}};
    // Where the database can hide one, the fix is to show it again, not a second index.
    auto showing = dialect;
    showing.unhide_index = [](const std::string& q, const std::string& i) {
      return "SHOW " + i + " ON " + q;
    };
    auto problems = idem::backend::schema_problems(showing, "`t`", ddl, good_columns(), indexes);
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0].what, Catch::Contains("index by_time leads with (at)") &&
                                     Catch::Contains("may not use it") &&
                                     Catch::Contains("purge_expired"));
    CHECK(problems[0].fix == "SHOW by_time ON `t`");
    // A visible index beside it serves, and a dialect without hiding asks for the index.
    auto visible = indexes;
    visible.push_back({"idx_expire", "at"});
    CHECK(idem::backend::schema_problems(showing, "`t`", ddl, good_columns(), visible).empty());
    problems = idem::backend::schema_problems(dialect, "`t`", ddl, good_columns(), indexes);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].fix == "INDEX idx_expire ON `t`");
  }
}
