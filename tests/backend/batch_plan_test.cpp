// idem::backend::BatchPlan without a store: keys in primary key order, repeats after the chunks,
// widths halved by a failed try and doubled by a clean one, one token per key for every try, the
// requests a cut-off chunk sent, and bad input refused before anything is planned.
#include <cstddef>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/backend/batch_plan.hpp>
#include <idem/backend/record_rules.hpp>

using idem::backend::BatchPlan;

namespace {

std::vector<idem::ClaimRequest> plan_requests(const std::vector<std::string>& ids) {
  std::vector<idem::ClaimRequest> r;
  for (const auto& id : ids)
    r.push_back({{"PAY", id}, "fp"});
  return r;
}

// Answers a chunk as a store would: each key acquired, its owner the chunk's token.
std::vector<idem::ClaimResult> acquired_all(BatchPlan& plan) {
  std::vector<idem::ClaimResult> out;
  const auto chunk = plan.chunk();
  for (std::size_t k = 0; k < chunk.requests.size(); ++k) {
    out.push_back(
        {idem::Verdict::acquired,
         idem::backend::claim_record(chunk.requests[k]->key, chunk.tokens[k], "fp", {}, {})});
  }
  return out;
}

std::vector<std::string> ids_of(const BatchPlan::Chunk& chunk) {
  std::vector<std::string> ids;
  for (const auto* r : chunk.requests)
    ids.push_back(r->key.id());
  REQUIRE(chunk.tokens.size() == chunk.requests.size());
  return ids;
}

}  // namespace

TEST_CASE(
    "batch plan: keys go in key order, a repeat after every chunk, answers in request order") {
  const auto requests = plan_requests({"c", "a", "c", "b", "a"});
  BatchPlan plan(requests, {}, 2);
  REQUIRE(plan.more_chunks());
  CHECK(ids_of(plan.chunk()) == std::vector<std::string>{"a", "b"});
  plan.claimed(acquired_all(plan));
  CHECK(ids_of(plan.chunk()) == std::vector<std::string>{"c"});
  plan.claimed(acquired_all(plan));
  CHECK_FALSE(plan.more_chunks());
  CHECK(plan.repeats() == std::vector<std::size_t>{2, 4});
  for (std::size_t i : plan.repeats()) {
    plan.answer(i, {idem::Verdict::in_progress,
                    idem::backend::claim_record(requests[i].key, "other", "fp", {}, {})});
  }
  const auto results = std::move(plan).results();
  REQUIRE(results.size() == 5);
  CHECK(results[0].record.key.id() == "c");
  CHECK(results[1].record.key.id() == "a");
  CHECK(results[3].record.key.id() == "b");
  CHECK(results[2].verdict == idem::Verdict::in_progress);
  CHECK(results[4].verdict == idem::Verdict::in_progress);
}

TEST_CASE("batch plan: a failed try halves the width, a clean one doubles it up to the most") {
  std::vector<std::string> ids;
  for (int i = 0; i < 11; ++i)
    ids.push_back("k" + std::to_string(i + 10));
  const auto requests = plan_requests(ids);
  BatchPlan plan(requests, {}, 8);
  std::vector<std::size_t> widths;
  // Chunks wider than 2 fail, as a contended statement keeps losing.
  while (plan.more_chunks()) {
    const std::size_t width = plan.chunk().requests.size();
    widths.push_back(width);
    if (width > 2) {
      plan.narrow();
      continue;
    }
    plan.claimed(acquired_all(plan));
  }
  CHECK(widths == std::vector<std::size_t>{8, 4, 2, 4, 2, 4, 2, 4, 2, 3, 2, 1});
  CHECK(plan.acquired().size() == 11);
}

TEST_CASE("batch plan: a retried chunk sends each key with the same token, every key its own") {
  const auto requests = plan_requests({"a", "b", "c", "d"});
  BatchPlan plan(requests, {}, 4);
  const auto wide = plan.chunk().tokens;
  const std::vector<std::string> first(wide.begin(), wide.end());
  CHECK(std::set<std::string>(first.begin(), first.end()).size() == 4);
  plan.narrow();
  const auto narrow = plan.chunk().tokens;
  CHECK(std::vector<std::string>(narrow.begin(), narrow.end()) ==
        std::vector<std::string>{first[0], first[1]});
  // A try cut off now may have landed any key the wider try sent.
  const auto sent = plan.in_flight();
  REQUIRE(sent.size() == 4);
  for (std::size_t k = 0; k < 4; ++k) {
    CHECK(sent[k].first.id() == std::string(1, static_cast<char>('a' + k)));
    CHECK(sent[k].second == first[k]);
  }
  plan.claimed(acquired_all(plan));
  // c and d: sent by the wide try, not answered yet.
  const auto still = plan.in_flight();
  REQUIRE(still.size() == 2);
  CHECK(still[0].first.id() == "c");
  CHECK(still[1].second == first[3]);
  CHECK(ids_of(plan.chunk()) == std::vector<std::string>{"c", "d"});
  plan.claimed(acquired_all(plan));
  CHECK(plan.in_flight().empty());
}

TEST_CASE("batch plan: only acquired answers are claims to release") {
  const auto requests = plan_requests({"a", "b"});
  BatchPlan plan(requests, {}, 2);
  auto answers = acquired_all(plan);
  answers[1].verdict = idem::Verdict::replayed;
  plan.claimed(answers);
  const auto made = plan.acquired();
  REQUIRE(made.size() == 1);
  CHECK(made[0].record.key.id() == "a");
}

TEST_CASE("batch plan: bad input and misuse are refused with typed errors") {
  auto requests = plan_requests({"a", "b"});
  requests[1].fingerprint = "two words";
  CHECK_THROWS_AS(BatchPlan(requests, {}, 8), idem::InvalidArgument);
  CHECK_THROWS_AS(BatchPlan(plan_requests({"a"}), {.lease = std::chrono::milliseconds(0)}, 8),
                  idem::InvalidArgument);
  const auto good = plan_requests({"a", "b"});
  CHECK_THROWS_AS(BatchPlan(good, {}, 0), idem::InvalidArgument);
  BatchPlan plan(good, {}, 8);
  plan.chunk();
  CHECK_THROWS_AS(plan.claimed({}), idem::CorruptRecord);  // a chunk of two answered none
  CHECK_THROWS_AS(BatchPlan(good, {}, 8).results(), idem::UsageError);
  CHECK(BatchPlan(std::vector<idem::ClaimRequest>{}, {}, 8).results().empty());
}
