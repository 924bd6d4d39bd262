// idem::claim_batch on PostgreSQL: one statement per 128 keys (the INSERT and the rows it met),
// with the per-key answers of the single claim, under real connections racing real threads.
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/batch.hpp>

#include "../support/batch_states.hpp"
#include "../support/pg_server.hpp"

using idem::ClaimRequest;
using idem::Verdict;
using idem_test::batch_key;

TEST_CASE("pg claim_batch acquires fresh keys across several statements - in request order") {
  idem_test::PgTable t;
  std::vector<ClaimRequest> requests;
  for (int i = 0; i < 300; ++i)  // 128 + 128 + 44 keys
    requests.push_back({batch_key(i), "fp"});
  // Keys that a text[] literal must escape, and one PostgreSQL would fold if it were unquoted.
  for (const char* id : {"quote\"d", "back\\slash", "comma,brace}{", "NULL", " spaced "})
    requests.push_back({idem::Key{"mq.order", id}, "fp"});
  const auto results = idem::claim_batch(t.store, requests, {});
  REQUIRE(results.size() == requests.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    INFO("request " << i);
    CHECK(results[i].verdict == Verdict::acquired);
    CHECK(results[i].record.key == requests[i].key);
    CHECK(results[i].record.ticket.fence == 1);
  }
  CHECK(t.count("status = 0") == static_cast<long long>(requests.size()));
  for (const char* id : {"quote\"d", "back\\slash", "comma,brace}{", "NULL", " spaced "}) {
    const auto found = t.store.find(idem::Key{"mq.order", id});
    REQUIRE(found);
    CHECK(found->key.id() == id);
  }
  // Run again, every key is a live claim of someone else.
  for (const auto& r : idem::claim_batch(t.store, requests, {}))
    CHECK(r.verdict == Verdict::in_progress);
}

TEST_CASE("pg claim_batch answers exactly what one claim after another answers") {
  idem_test::PgTable batched;
  idem_test::PgTable single;
  idem_test::check_claim_batch_answers(batched.store, single.store);
}

TEST_CASE("pg racing batches and single claims over shared keys - one owner per key") {
  idem_test::PgTable t(16);
  constexpr int keys = 800;
  idem_test::check_race(t.store, keys);
  CHECK(t.count() == keys);  // and nothing else
}
