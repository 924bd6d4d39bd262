// idem::Janitor on MemoryStore: what a round purges and releases, the paced purge
// (purge_pause), a prompt stop in the middle of a paced round, and the resolver pass.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <idem/idem.hpp>
#include <idem/janitor.hpp>
#include <idem/resolver.hpp>

#include "../support/forwarding_store.hpp"

using namespace std::chrono_literals;

namespace {

struct JanitorFixture {
  idem::ManualClock clock;
  idem::MemoryStore store{[this] { return clock.now(); }};

  // `n` records that expire after 1 s, then the clock moves past them.
  void expired(int n) {
    for (int i = 0; i < n; ++i)
      store.claim(idem::Key{"OLD", "k" + std::to_string(i)}, "", {.lease = 1s, .ttl = 1s});
    clock.advance(2s);
  }
  std::size_t purge_all() { return store.purge_expired(1'000'000, 1); }
};

}  // namespace

TEST_CASE_METHOD(JanitorFixture,
                 "janitor: a paced round purges batch by batch, pausing in between") {
  expired(50);
  store.claim(idem::Key{"LIVE", "l"}, "", {.ttl = 1h});
  const auto t0 = std::chrono::steady_clock::now();
  idem::Janitor janitor(
      store, {.interval = 1h, .purge_batch = 10, .purge_max_batches = 100, .purge_pause = 20ms});
  for (int i = 0; i < 5000 && janitor.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(janitor.stats().rounds == 1);
  CHECK(janitor.stats().purged == 50);
  CHECK(purge_all() == 0);  // nothing expired is left; the live record stays
  CHECK(store.find(idem::Key{"LIVE", "l"}));
  // Five full batches and a sixth that finds nothing: five pauses (a lower bound, which no
  // load can break).
  CHECK(took >= 100ms);
}

TEST_CASE_METHOD(JanitorFixture, "janitor: a paced round stops at purge_max_batches") {
  expired(50);
  idem::Janitor janitor(
      store, {.interval = 1h, .purge_batch = 10, .purge_max_batches = 3, .purge_pause = 1ms});
  for (int i = 0; i < 5000 && janitor.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(janitor.stats().rounds == 1);
  CHECK(janitor.stats().purged == 30);
  CHECK(janitor.stats().purge_unfinished == 1);  // it left expired records behind
  CHECK(purge_all() == 20);
}

TEST_CASE_METHOD(JanitorFixture, "janitor: destroying it mid-pause stops the round at once") {
  expired(50);
  const auto t0 = std::chrono::steady_clock::now();
  {
    idem::Janitor janitor(
        store, {.interval = 1h, .purge_batch = 10, .purge_max_batches = 100, .purge_pause = 1h});
    for (int i = 0; i < 5000 && janitor.stats().purged == 0; ++i)
      std::this_thread::sleep_for(1ms);
    CHECK(janitor.stats().purged == 10);  // the first batch, then the long pause
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 60s);  // the hour's pause was cut short
  CHECK(purge_all() == 40);
}

namespace {

// A resolver whose answer per key id the test sets, counting its calls.
struct Answers {
  std::mutex m;
  std::map<std::string, idem::Resolution> by_id;
  std::atomic<int> calls{0};
  idem::Resolution at(const std::string& id) {
    ++calls;
    std::lock_guard lock(m);
    const auto it = by_id.find(id);
    return it == by_id.end() ? idem::Resolution::unknown("not in the test's table") : it->second;
  }
};

}  // namespace

TEST_CASE_METHOD(JanitorFixture,
                 "janitor with resolvers: stale claims are resolved, never released "
                 "blindly - other biz_types are released by a fenced repair") {
  Answers answers;
  answers.by_id.emplace("paid", idem::Resolution::happened(nlohmann::json{{"charge", "ch_1"}}));
  answers.by_id.emplace("free", idem::Resolution::not_happened());
  idem::Resolvers resolvers;
  resolvers.add("PAY", [&](const idem::Record& r, const idem::ResolveContext&) {
    return answers.at(r.key.id());
  });
  const idem::Options dies{.lease = 1s, .ttl = 1h};
  for (const char* id : {"paid", "free", "dunno"})
    store.claim(idem::Key{"PAY", id}, "", dies);
  store.claim(idem::Key{"MAIL", "m1"}, "", dies);
  store.claim(idem::Key{"PAY", "live"}, "", {.lease = 1h, .ttl = 2h});
  clock.advance(2s);

  idem::Metrics metrics;
  idem::Janitor janitor(store, {.interval = 1h, .resolvers = &resolvers, .metrics = &metrics});
  for (int i = 0; i < 5000 && janitor.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);  // the first round, on the Janitor's thread
  REQUIRE(janitor.stats().rounds == 1);
  const auto stats = janitor.stats();
  CHECK(stats.resolved_happened == 1);
  CHECK(stats.resolved_not_happened == 1);
  CHECK(stats.resolved_unknown == 1);
  CHECK(stats.released == 1);  // MAIL/m1, which has no resolver
  CHECK(stats.outcome_unknown == 1);
  CHECK_THAT(metrics.render(),
             Catch::Contains("# TYPE idem_outcome_unknown_records gauge") &&
                 Catch::Contains("idem_outcome_unknown_records{biz_type=\"PAY\"} 1\n"));
  CHECK(answers.calls == 3);

  const auto paid = store.find(idem::Key{"PAY", "paid"});
  CHECK(paid->status == idem::Status::succeeded);
  CHECK(nlohmann::json::parse(paid->snapshot)["charge"] == "ch_1");
  CHECK(paid->repair_reason == "resolver: the effect happened");
  const auto free = store.find(idem::Key{"PAY", "free"});
  CHECK(free->status == idem::Status::failed);
  CHECK(free->retryable);
  CHECK(store.find(idem::Key{"PAY", "dunno"})->status == idem::Status::outcome_unknown);
  CHECK(store.find(idem::Key{"MAIL", "m1"})->status == idem::Status::failed);
  CHECK(store.find(idem::Key{"PAY", "live"})->status == idem::Status::processing);

  // A later round asks about the unknown record again only after unknown_retry; once the
  // gateway answers, the record is settled.
  {
    std::lock_guard lock(answers.m);
    answers.by_id.emplace("dunno", idem::Resolution::happened(nlohmann::json{{"charge", "ch_3"}}));
  }
  janitor.run_once();
  CHECK(answers.calls == 3);  // not yet: unknown_retry has not passed
  clock.advance(6min);
  janitor.run_once();
  CHECK(answers.calls == 4);
  CHECK(store.find(idem::Key{"PAY", "dunno"})->status == idem::Status::succeeded);
  CHECK(janitor.stats().outcome_unknown == 0);
  CHECK_THAT(metrics.render(), Catch::Contains("idem_outcome_unknown_records{biz_type=\"PAY\"} 0"));
  CHECK(janitor.stats().errors == 0);
}

TEST_CASE_METHOD(JanitorFixture,
                 "janitor with resolvers: a claim that took the record over meanwhile "
                 "is left alone") {
  idem::Resolvers resolvers;
  std::atomic<bool> taken{false};
  resolvers.add("PAY", [&](const idem::Record& r, const idem::ResolveContext&) {
    // While the Janitor asks, a duplicate takes the stale claim over.
    const auto c = store.claim(r.key, "", {.lease = 1h, .ttl = 2h});
    taken = c.verdict == idem::Verdict::acquired;
    return idem::Resolution::not_happened();
  });
  store.claim(idem::Key{"PAY", "race"}, "", {.lease = 1s, .ttl = 1h});
  clock.advance(2s);
  idem::Janitor janitor(store, {.interval = 1h, .resolvers = &resolvers});
  for (int i = 0; i < 5000 && janitor.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(janitor.stats().rounds == 1);
  REQUIRE(taken);
  const auto r = store.find(idem::Key{"PAY", "race"});
  CHECK(r->status == idem::Status::processing);  // the new claim's, not released under it
  CHECK(r->attempts == 2);
  CHECK(janitor.stats().resolved_not_happened == 0);
  CHECK(janitor.stats().errors == 0);
}

namespace {

// A store whose purge fails retryably and whose release fails permanently, while `broken`.
struct BrokenJobs : idem_test::ForwardingStore {
  bool broken = true;
  std::size_t purge_expired(std::size_t b, std::size_t m) {
    if (broken) throw idem::StoreError("purge: the database went away", true);
    return inner.purge_expired(b, m);
  }
  std::size_t release_stale(std::size_t b) {
    if (broken) throw idem::CorruptRecord("release: a row idem cannot read");
    return inner.release_stale(b);
  }
};

}  // namespace

TEST_CASE_METHOD(JanitorFixture,
                 "janitor metrics: each round's work, its time and the stale claims") {
  expired(3);
  const idem::Options dies{.lease = 1s, .ttl = 1h};
  store.claim(idem::Key{"PAY", "dead-1"}, "", dies);
  store.claim(idem::Key{"PAY", "dead-2"}, "", dies);
  clock.advance(2s);
  idem::Metrics metrics;
  // Not rendered before a Janitor has run a round: no gauge claims a time or a count.
  CHECK(metrics.render().find("idem_janitor_last_round_timestamp_seconds ") == std::string::npos);
  CHECK(metrics.render().find("idem_stale_claims ") == std::string::npos);

  const auto before = std::chrono::system_clock::now();
  idem::Janitor janitor(store, {.interval = 1h, .purge_pause = 0ms, .metrics = &metrics});
  for (int i = 0; i < 5000 && janitor.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(janitor.stats().rounds == 1);
  CHECK(janitor.stats().stale_claims == 2);
  const std::string text = metrics.render();
  CHECK_THAT(text,
             Catch::Contains("idem_janitor_rounds_total 1\n") &&
                 Catch::Contains("idem_janitor_purged_total 3\n") &&
                 Catch::Contains("idem_janitor_purge_unfinished_total 0\n") &&
                 Catch::Contains("idem_janitor_released_total 2\n") &&
                 Catch::Contains("# TYPE idem_stale_claims gauge\nidem_stale_claims 2\n") &&
                 Catch::Contains("idem_janitor_errors_total{task=\"purge\",kind=\"retryable\"} 0"));
  // The last round's time, in Unix seconds, between the start of the test and now.
  const std::string sample = "\nidem_janitor_last_round_timestamp_seconds ";
  const auto at = text.find(sample);
  REQUIRE(at != std::string::npos);
  const double seconds = std::stod(text.substr(at + sample.size()));
  const auto unix_seconds = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  };
  CHECK(seconds >= unix_seconds(before) - 0.001);
  CHECK(seconds <= unix_seconds(std::chrono::system_clock::now()) + 0.001);

  // The next round finds nothing stale: the gauge says so.
  janitor.run_once();
  CHECK_THAT(metrics.render(), Catch::Contains("idem_stale_claims 0\n") &&
                                   Catch::Contains("idem_janitor_rounds_total 2\n"));
}

TEST_CASE_METHOD(JanitorFixture,
                 "janitor metrics: failures by job, retryable and permanent apart") {
  BrokenJobs broken{{store}};
  idem::Metrics metrics;
  idem::Janitor janitor(broken, {.interval = 1h, .metrics = &metrics});
  for (int i = 0; i < 5000 && janitor.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);
  janitor.run_once();
  REQUIRE(janitor.stats().rounds == 2);  // a round with failed jobs still ends
  CHECK(janitor.stats().errors == 4);
  CHECK(janitor.stats().retryable_errors == 2);
  using Task = idem::Metrics::JanitorCounters::Task;
  CHECK(metrics.janitor().errors(Task::purge, true) == 2);
  CHECK(metrics.janitor().errors(Task::release, false) == 2);
  CHECK(metrics.janitor().errors(Task::purge, false) == 0);
  CHECK_THAT(
      metrics.render(),
      Catch::Contains("idem_janitor_errors_total{task=\"purge\",kind=\"retryable\"} 2\n") &&
          Catch::Contains("idem_janitor_errors_total{task=\"release\",kind=\"permanent\"} 2\n"));
}

TEST_CASE_METHOD(JanitorFixture,
                 "janitor metrics: releasing and purging off lists nothing, fails nothing") {
  expired(3);
  idem::Metrics metrics;
  idem::Janitor janitor(store, {.interval = 1h,
                                .purge_max_batches = 0,
                                .purge_pause = 0ms,
                                .release_batch = 0,
                                .metrics = &metrics});
  janitor.run_once();
  const idem::JanitorStats s = janitor.stats();
  CHECK(s.errors == 0);
  CHECK(s.purged == 0);
  CHECK(s.purge_unfinished == 0);  // purging is off: nothing was left unfinished
  CHECK(metrics.janitor().errors(idem::Metrics::JanitorCounters::Task::list, false) == 0);
  CHECK(metrics.render().find("idem_stale_claims ") == std::string::npos);
}
