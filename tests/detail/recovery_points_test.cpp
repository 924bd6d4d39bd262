// idem/detail/recovery_points.hpp: the rules of a record's recovery points, without a store.
#include <string>

#include <catch2/catch.hpp>
#include <idem/detail/recovery_points.hpp>
#include <nlohmann/json.hpp>

using idem::detail::kept_result;
using idem::detail::local_step_start;
using idem::detail::LocalStepStart;
using idem::detail::with_step;
using nlohmann::json;

TEST_CASE("recovery points: a step is added once, and its first result is kept") {
  const std::string one = with_step("", "reserve", R"({"hold":7})");
  CHECK(json::parse(one) == json{{"reserve", {{"hold", 7}}}});
  const std::string two = with_step(one, "charge", "12");
  CHECK(json::parse(two) == json{{"reserve", {{"hold", 7}}}, {"charge", 12}});
  CHECK(with_step(two, "charge", "13") == two);  // first result wins: unchanged
  CHECK(kept_result(two, "charge") == std::optional<std::string>{"12"});
  CHECK_FALSE(kept_result(two, "ship"));
  CHECK_FALSE(kept_result("", "ship"));
}

TEST_CASE("recovery points: bad names, results and sizes are InvalidArgument") {
  CHECK_THROWS_AS(with_step("", "", "1"), idem::InvalidArgument);
  CHECK_THROWS_AS(with_step("", "a b", "1"), idem::InvalidArgument);
  CHECK_THROWS_AS(with_step("", std::string(idem::max_step_name_bytes + 1, 'a'), "1"),
                  idem::InvalidArgument);
  CHECK_THROWS_AS(with_step("", "reserve", "not json"), idem::InvalidArgument);
  std::string points;
  for (std::size_t i = 0; i < idem::max_steps; ++i)
    points = with_step(points, "s" + std::to_string(i), "1");
  CHECK_THROWS_AS(with_step(points, "one-too-many", "1"), idem::InvalidArgument);
  const std::string big = "\"" + std::string(idem::max_snapshot_bytes, 'x') + "\"";
  CHECK_THROWS_AS(with_step("", "big", big), idem::InvalidArgument);
  CHECK_THROWS_AS(kept_result("[1,2]", "reserve"), idem::CorruptRecord);
}

TEST_CASE("recovery points: how a local step begins") {
  const std::string claimed = with_step("", "reserve", "1");
  // The claim found it finished: its kept result, no read.
  CHECK(local_step_start(claimed, claimed, "reserve") == LocalStepStart::kept);
  // Nobody finished it: run, no read (the point's guarded write checks the belief).
  CHECK(local_step_start(claimed, claimed, "charge") == LocalStepStart::run);
  CHECK(local_step_start("", "", "charge") == LocalStepStart::run);
  // Only this attempt's own write says so (its transaction may have rolled back): read.
  const std::string believed = with_step(claimed, "charge", "2");
  CHECK(local_step_start(claimed, believed, "charge") == LocalStepStart::read);
  // A belief with other steps does not make this one read.
  CHECK(local_step_start(claimed, believed, "ship") == LocalStepStart::run);
}
