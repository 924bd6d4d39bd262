// idem::RecordStats and backend::tally(): the counts a store's stats() answers, judged with the rules of
// idem/backend/record_rules.hpp (the stores themselves: the conformance case "stats counts ...").
#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/backend/record_rules.hpp>
#include <idem/options.hpp>
#include <idem/record_stats.hpp>

namespace {

using idem::Status;
using idem::backend::tally;
using namespace std::chrono_literals;

const idem::TimePoint counted_at{idem::Duration{1'700'000'000'000}};

idem::Record counted_record(std::string biz_type, std::string id, Status status,
                            idem::Duration lease_left, idem::Duration ttl_left) {
  idem::Record r = idem::backend::claim_record(idem::Key{std::move(biz_type), std::move(id)},
                                               "owner", "", counted_at, idem::Options{});
  r.status = status;
  r.lease_until = counted_at + lease_left;
  r.expire_at = counted_at + ttl_left;
  return r;
}

}  // namespace

TEST_CASE("record stats: tally counts by type and status in order, the backlog and stale claims") {
  idem::RecordStats s{.now = counted_at};
  tally(s, counted_record("REFUND", "a", Status::succeeded, -1s, 1h));
  tally(s, counted_record("PAY", "b", Status::processing, -5s, 1h));        // stale
  tally(s, counted_record("PAY", "c", Status::succeeded, -1s, -1s));        // expired
  tally(s, counted_record("PAY", "d", Status::processing, -9s, 1h));        // stale, the oldest
  tally(s, counted_record("PAY", "e", Status::processing, 30s, 1h));        // live
  tally(s, counted_record("PAY", "f", Status::outcome_unknown, -9s, -1h));  // never expires
  tally(s, counted_record("PAY", "g", Status::processing, -1s, -1s));       // expired, not stale
  CHECK(s.counts == std::vector<idem::RecordCount>{
                        {.biz_type = "PAY", .status = Status::processing, .records = 4},
                        {.biz_type = "PAY", .status = Status::succeeded, .records = 1},
                        {.biz_type = "PAY", .status = Status::outcome_unknown, .records = 1},
                        {.biz_type = "REFUND", .status = Status::succeeded, .records = 1}});
  CHECK(s.total() == 7);
  CHECK(s.purge_backlog == 2);
  CHECK(s.stale_claims == 2);
  CHECK(s.oldest_stale_lease == counted_at - 9s);
  CHECK_FALSE(s.table_bytes.has_value());
}

TEST_CASE("record stats: nothing counted is all zero") {
  const idem::RecordStats s;
  CHECK(s.counts.empty());
  CHECK(s.total() == 0);
  CHECK(s.purge_backlog == 0);
  CHECK_FALSE(s.oldest_stale_lease.has_value());
}
