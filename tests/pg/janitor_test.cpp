// idem::pg::Janitor (idem/pg/janitor.hpp) on the test server: a round purges expired records
// and releases stale claims; with a resolver it settles a crashed attempt by looking the
// business up (a fenced repair), so that its duplicate replays instead of charging again.
#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include <idem/pg.hpp>

#include "../support/pg_server.hpp"

using namespace std::chrono_literals;

namespace {

// A Janitor starts its first round on its own thread as it is built: the test waits for that
// round (a run_once() beside it would be a second round racing the first).
void wait_for_first_round(const idem::pg::Janitor& janitor) {
  for (int i = 0; i < 10000 && janitor.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(janitor.stats().rounds == 1);
}

}  // namespace

TEST_CASE("pg janitor: a round purges expired records and releases stale claims") {
  idem_test::PgTable t;
  const auto expired = t.store.claim(idem::Key{"PAY", "expired"}, "", {.lease = 50ms, .ttl = 60ms});
  t.store.complete(expired.record.key, expired.record.ticket, "{}");
  const auto stale = t.store.claim(idem::Key{"PAY", "stale"}, "", {.lease = 50ms, .ttl = 1h});
  t.store.claim(idem::Key{"PAY", "live"}, "", {.lease = 1h, .ttl = 1h});
  std::this_thread::sleep_for(120ms);

  idem::pg::Janitor janitor(t.store, {.interval = std::chrono::hours{1}, .purge_pause = 0ms});
  wait_for_first_round(janitor);
  CHECK_FALSE(t.store.find(idem::Key{"PAY", "expired"}));
  const auto released = t.store.find(idem::Key{"PAY", "stale"});
  REQUIRE(released);
  CHECK(released->status == idem::Status::failed);
  CHECK(released->retryable);
  CHECK(t.store.find(idem::Key{"PAY", "live"})->status == idem::Status::processing);
  CHECK_THROWS_AS(t.store.complete(stale.record.key, stale.record.ticket, "{}"), idem::LeaseLost);
  CHECK(janitor.stats().purged == 1);
  CHECK(janitor.stats().released == 1);
}

TEST_CASE("pg janitor: a resolver settles a crashed charge - its duplicate replays, nothing runs") {
  idem_test::PgTable t;
  const idem::Key key{"PAY", "crashed-charge"};
  // The worker charged the card and died before recording it.
  t.store.claim(key, "fp", {.lease = 50ms, .ttl = 1h});
  std::this_thread::sleep_for(80ms);

  idem::Resolvers resolvers;
  int asked = 0;
  resolvers.add("PAY", [&](const idem::Record& r, const idem::ResolveContext&) {
    ++asked;
    CHECK(r.key == key);
    return idem::Resolution::happened(std::string("charged by the gateway"));
  });
  idem::pg::Janitor janitor(t.store, {.interval = std::chrono::hours{1}, .resolvers = &resolvers});
  wait_for_first_round(janitor);
  CHECK(asked == 1);
  CHECK(janitor.stats().resolved_happened == 1);

  int ran = 0;
  const auto out = idem::run_once(t.store, key, "fp", [&] {
    ++ran;
    return std::string("charged again");
  });
  CHECK(ran == 0);
  CHECK(out.verdict() == idem::Verdict::replayed);
  CHECK(out.value() == "charged by the gateway");
}
