// idem/backend/record_columns.hpp: the one column order every SQL store reads in, the columns a
// claim fills, and the order of a takeover's values.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <idem/backend/record_columns.hpp>
#include <idem/detail/ddl_shape.hpp>

#include "../support/paths.hpp"

using namespace std::chrono_literals;
namespace column = idem::backend::column;

TEST_CASE("the read order is the order of docs/schema.sql's table") {
  std::ifstream in(std::string(idem_test::paths::source_dir) + "/docs/schema.sql");
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  const auto shape = idem::detail::ddl_shape(text.str());
  REQUIRE(shape.columns.size() == std::size_t{column::count});
  for (std::size_t i = 0; i < shape.columns.size(); ++i)
    CHECK(shape.columns[i].name == idem::backend::column_names[i]);
}

TEST_CASE("column_list spells each column, times through the dialect's expression") {
  CHECK(idem::backend::column_list(3) == "idempotent_key, biz_type, status");
  const std::string claimed = idem::backend::column_list(column::claimed);
  CHECK(claimed.ends_with("updated_at, expire_at"));
  CHECK(claimed.find("recovery_points") == std::string::npos);
  const std::string spelled =
      idem::backend::column_list(column::count, [](std::string_view name, bool is_time) {
        return is_time ? "ms(" + std::string(name) + ")" : std::string(name);
      });
  CHECK(spelled ==
        "idempotent_key, biz_type, status, fence, owner_token, request_hash, response_snapshot, "
        "retryable, attempts, ms(lease_until), ms(created_at), ms(updated_at), ms(expire_at), "
        "recovery_points, repair_reason, ms(repaired_at)");
  CHECK(column::now == column::count);
  CHECK(column::count_with_now == column::count + 1);
}

namespace {

// Each value of takeover_values() as text, times as milliseconds, the points marked.
std::vector<std::string> takeover_texts(idem::backend::Decision d, const idem::Record& next,
                                        const idem::Ticket& read) {
  std::vector<std::string> out;
  idem::backend::takeover_values(d, next, read, [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, idem::TimePoint>)
      out.push_back("t" + std::to_string(v.time_since_epoch().count()));
    else if constexpr (std::is_same_v<V, idem::backend::PointsValue>)
      out.push_back("points:" + std::string(v.bytes));
    else if constexpr (std::is_convertible_v<V, std::string>)
      out.emplace_back(v);
    else
      out.push_back(std::to_string(v));
  });
  return out;
}

}  // namespace

TEST_CASE("a takeover's values follow its placeholders: record, key, ticket read, points") {
  const idem::TimePoint t0{idem::Duration{1'000}};
  idem::Record next = idem::backend::claim_record(idem::Key{"PAY", "k1"}, "owner-2", "fp", t0,
                                                  idem::Options{.lease = 2s, .ttl = 10s});
  next.ticket.fence = 7;
  next.attempts = 3;
  next.recovery_points = R"({"charged":"ch_1"})";
  const idem::Ticket read{6, "owner-1"};
  const std::vector<std::string> retry = {
      "0",     "7",      "owner-2", "fp",  "3", "t3000",   "t1000",
      "t1000", "t11000", "k1",      "PAY", "6", "owner-1", R"(points:{"charged":"ch_1"})"};
  CHECK(takeover_texts(idem::backend::Decision::take_over_retry, next, read) == retry);
  CHECK(takeover_texts(idem::backend::Decision::take_over_stale, next, read) == retry);
  // An expired record starts afresh: no points to guard the write with.
  const auto fresh = takeover_texts(idem::backend::Decision::take_over_expired, next, read);
  CHECK(fresh == std::vector<std::string>(retry.begin(), retry.end() - 1));
}
