// idem::TableLayout and the stamp rules of idem/table_layout.hpp, which every store with a schema
// applies (the stores themselves: tests/mysql/migration_test.cpp, tests/sqlite/migration_test.cpp).
#include <cstdint>
#include <optional>
#include <string>

#include <catch2/catch.hpp>
#include <idem/table_layout.hpp>

namespace {

const idem::TableLayout current{.layout = 2, .oldest_reader = 2, .stamped = true};

bool same(const idem::TableLayout& a, const idem::TableLayout& b) {
  return a.layout == b.layout && a.oldest_reader == b.oldest_reader && a.stamped == b.stamped;
}

}  // namespace

TEST_CASE("table layout: the stamp's text reads back as what was written") {
  CHECK(idem::detail::layout_stamp(current) == "idem layout=2 oldest_reader=2");
  const auto read = idem::detail::parse_layout_stamp("idem layout=7 oldest_reader=3");
  REQUIRE(read.has_value());
  CHECK(same(*read, {7, 3, true}));
  CHECK(same(*idem::detail::parse_layout_stamp(idem::detail::layout_stamp(current)), current));
}

TEST_CASE("table layout: a text that is not idem's stamp is no stamp") {
  for (const char* text :
       {"", "payments dedup", "idem layout=2", "idem layout=2 oldest_reader=",
        "idem layout=x "
        "oldest_reader=1",
        "idem layout=2 oldest_reader=2 ", "idem layout=0 oldest_reader=0",
        "idem layout=2 oldest_reader=3", "idem layout=-1 oldest_reader=1",
        "IDEM layout=2 oldest_reader=2", "idem layout=99999999999 oldest_reader=1"}) {
    INFO(text);
    CHECK_FALSE(idem::detail::parse_layout_stamp(text).has_value());
  }
}

TEST_CASE("table layout: stored numbers are a stamp only as idem writes them") {
  CHECK(same(*idem::detail::stamp_from(2, 2), current));
  CHECK(same(*idem::detail::stamp_from(5, 1), {5, 1, true}));
  CHECK_FALSE(idem::detail::stamp_from(0, 0).has_value());
  CHECK_FALSE(idem::detail::stamp_from(2, 3).has_value());
  CHECK_FALSE(idem::detail::stamp_from(-1, -1).has_value());
  CHECK_FALSE(idem::detail::stamp_from(std::int64_t{1} << 40, 1).has_value());
}

TEST_CASE("table layout: without a stamp the columns tell the first layout from the current") {
  CHECK(same(idem::detail::table_layout(std::nullopt, true, current), {2, 2, false}));
  CHECK(same(idem::detail::table_layout(std::nullopt, false, current), {1, 1, false}));
  // A stamp wins over the columns.
  CHECK(same(idem::detail::table_layout(idem::TableLayout{3, 2, true}, false, current),
             {3, 2, true}));
}

TEST_CASE("table layout: a migration stamps a table without a stamp or with an older one only") {
  CHECK(idem::detail::needs_stamp({2, 2, false}, current));
  CHECK(idem::detail::needs_stamp({1, 1, false}, current));
  CHECK(idem::detail::needs_stamp({1, 1, true}, current));
  CHECK_FALSE(idem::detail::needs_stamp({2, 2, true}, current));
  CHECK_FALSE(idem::detail::needs_stamp({3, 2, true}, current));  // a newer idem's: left alone
}

TEST_CASE("table layout: only a table that needs a newer reader is refused, naming both layouts") {
  CHECK_FALSE(idem::detail::layout_problem({1, 1, false}, 2).has_value());
  CHECK_FALSE(idem::detail::layout_problem({2, 2, true}, 2).has_value());
  CHECK_FALSE(idem::detail::layout_problem({3, 2, true}, 2).has_value());
  const auto problem = idem::detail::layout_problem({4, 3, true}, 2);
  REQUIRE(problem.has_value());
  CHECK_THAT(problem->what, Catch::Contains("layout 4") && Catch::Contains("layout 3 or later") &&
                                Catch::Contains("knows layout 2"));
  CHECK_THAT(problem->fix, Catch::Contains("layout 3 or later"));
}
