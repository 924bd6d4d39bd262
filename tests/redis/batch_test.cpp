// idem::claim_batch on Redis: a chunk of up to 128 distinct keys is one pipeline of claim scripts,
// each answer settled as the single claim settles it, under real connections racing real threads.
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/batch.hpp>
#include <idem/redis.hpp>

#include "../support/batch_states.hpp"
#include "../support/redis_server.hpp"

using idem::ClaimRequest;
using idem::Verdict;
using idem_test::batch_key;

TEST_CASE("redis claim_batch acquires fresh keys across several pipelines - in request order") {
  idem_test::RedisStore t(2);
  std::vector<ClaimRequest> requests;
  for (int i = 0; i < 300; ++i)  // 128 + 128 + 44 keys
    requests.push_back({batch_key(i), "fp"});
  requests.push_back({idem::Key{"mq.order", "spaced {braced} key"}, "fp"});
  const auto results = idem::claim_batch(t.store, requests, {});
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].verdict == Verdict::acquired);
    CHECK(results[i].record.key == requests[i].key);
    CHECK(results[i].record.ticket.fence == 1);
    const auto stored = t.store.find(requests[i].key);
    REQUIRE(stored);
    CHECK(stored->status == idem::Status::processing);
    CHECK(stored->ticket == results[i].record.ticket);
  }
  // Run again, every key is a live claim of someone else.
  for (const auto& r : idem::claim_batch(t.store, requests, {}))
    CHECK(r.verdict == Verdict::in_progress);
}

TEST_CASE("redis claim_batch answers exactly what one claim after another answers") {
  idem_test::RedisStore batched(2);
  idem_test::RedisStore single(2);
  idem_test::check_claim_batch_answers(batched.store, single.store);
}

TEST_CASE("redis racing batches and single claims over shared keys - one owner per key") {
  idem_test::RedisStore t(16);
  constexpr int keys = 800;
  idem_test::check_race(t.store, keys);
}
