// The observer hook (idem/observer.hpp) and the Prometheus counters (idem/metrics.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/consume.hpp>
#include <idem/guard.hpp>
#include <idem/memory_store.hpp>
#include <idem/metrics.hpp>
#include <idem/run_once.hpp>

#include "../support/forwarding_store.hpp"

using namespace std::chrono_literals;
using idem::EventKind;

namespace {

struct Recorder final : idem::Observer {
  struct Seen {
    EventKind kind;
    std::string biz_type;
    std::string id;
    std::chrono::nanoseconds latency;
    std::string error;
    std::uint64_t fence = 0;
    std::uint32_t attempts = 0;
    std::string reason;
    std::string context;
  };
  void on_event(const idem::Event& e) noexcept override {
    std::lock_guard lock(mutex);
    events.push_back({e.kind, std::string(e.biz_type), std::string(e.id), e.latency,
                      e.error ? e.error->what() : "", e.fence, e.attempts, std::string(e.reason),
                      std::string(e.context)});
  }
  std::vector<EventKind> kinds() {
    std::lock_guard lock(mutex);
    std::vector<EventKind> out;
    for (const auto& e : events)
      out.push_back(e.kind);
    return out;
  }
  std::mutex mutex;
  std::vector<Seen> events;
};

// A store whose every operation can be made to fail like a database that went away.
struct FlakyStore : idem_test::ForwardingStore {
  bool down = false;
  void check() const {
    if (down) throw idem::StoreError("flaky: the database went away", true);
  }
  idem::ClaimResult claim(const idem::Key& k, std::string_view fp, const idem::Options& o) {
    check();
    return inner.claim(k, fp, o);
  }
  void complete(const idem::Key& k, const idem::Ticket& t, std::string_view s) {
    check();
    inner.complete(k, t, s);
  }
  void fail(const idem::Key& k, const idem::Ticket& t, std::string_view s, bool r) {
    check();
    inner.fail(k, t, s, r);
  }
};

struct ObserverFixture {
  idem::ManualClock clock;
  idem::MemoryStore store{[this] { return clock.now(); }};
  Recorder recorder;
  idem::Options options{.lease = 10s, .ttl = 1h, .observer = &recorder};
};

const idem::Key key{"PAY", "T-1"};

// The text exposition format's two line kinds, as Metrics writes them (no std::regex: GCC 12
// warns falsely inside <regex> at -O2, and the sanitizer builds use -Werror).
bool is_name(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
}

bool is_number(std::string_view s) {
  if (s.empty()) return false;
  std::size_t digits = 0;
  for (char c : s) {
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c != '.' && c != 'e' && c != '-' && c != '+') {
      return false;
    }
  }
  return digits > 0 && s[0] >= '0' && s[0] <= '9';
}

// name{biz_type="...",label="..."} value; the Janitor's series have no biz_type
// (name value, or name{label="..."} value).
bool is_sample(std::string_view line) {
  const bool janitor =
      line.rfind("idem_janitor_", 0) == 0 || line.rfind("idem_stale_claims", 0) == 0;
  const auto brace = line.find('{');
  if (janitor && brace == std::string_view::npos) {
    const auto space = line.find(' ');
    return space != std::string_view::npos && is_name(line.substr(0, space)) &&
           is_number(line.substr(space + 1));
  }
  const auto close = line.find("} ");
  if (brace == std::string_view::npos || close == std::string_view::npos || close < brace)
    return false;
  if (!is_name(line.substr(0, brace)) || !is_number(line.substr(close + 2))) return false;
  std::string_view labels = line.substr(brace + 1, close - brace - 1);
  if (!janitor && labels.rfind("biz_type=\"", 0) != 0) return false;
  while (!labels.empty()) {
    const auto eq = labels.find("=\"");
    if (eq == std::string_view::npos || !is_name(labels.substr(0, eq))) return false;
    const auto end = labels.find('"', eq + 2);
    if (end == std::string_view::npos) return false;
    labels.remove_prefix(end + 1);
    if (!labels.empty()) {
      if (labels[0] != ',') return false;
      labels.remove_prefix(1);
    }
  }
  return true;
}

// # HELP name text / # TYPE name type
bool is_comment(std::string_view line) {
  if (line.rfind("# HELP ", 0) != 0 && line.rfind("# TYPE ", 0) != 0) return false;
  line.remove_prefix(7);
  const auto space = line.find(' ');
  return space != std::string_view::npos && is_name(line.substr(0, space)) &&
         space + 1 < line.size();
}

}  // namespace

TEST_CASE_METHOD(ObserverFixture, "observer: a request and its duplicates report each step") {
  CHECK(idem::run_once(
      store, key, "fp", [] { return 1; }, options));
  CHECK(idem::run_once(
      store, key, "fp", [] { return 1; }, options));  // replayed
  CHECK_FALSE(idem::run_once(
      store, key, "other", [] { return 1; }, options));  // conflict
  CHECK(recorder.kinds() == std::vector<EventKind>{EventKind::acquired, EventKind::committed,
                                                   EventKind::replayed, EventKind::conflict});
  for (const auto& e : recorder.events) {
    CHECK(e.biz_type == "PAY");
    CHECK(e.id == "T-1");
    CHECK(e.latency >= 0ns);
    CHECK(e.error.empty());
  }
}

TEST_CASE_METHOD(ObserverFixture,
                 "observer: a business that throws EffectUnknown reports one result, failed, "
                 "and its duplicates outcome_unknown") {
  const auto unsure = [&]() -> int { throw idem::EffectUnknown("timed out after sending"); };
  CHECK(idem::run_once(store, key, "fp", unsure, options).verdict() ==
        idem::Verdict::outcome_unknown);
  CHECK(idem::run_once(store, key, "fp", unsure, options).verdict() ==
        idem::Verdict::outcome_unknown);
  CHECK(recorder.kinds() ==
        std::vector<EventKind>{EventKind::acquired, EventKind::failed, EventKind::outcome_unknown});
}

TEST_CASE_METHOD(ObserverFixture, "observer: in progress, takeover, lease lost and abandonment") {
  idem::IdempotencyGuard first{store, key, "fp", options};
  REQUIRE(first.acquired());
  {
    idem::IdempotencyGuard dup{store, key, "fp", options};
    CHECK(dup.verdict() == idem::Verdict::in_progress);
  }
  clock.advance(11s);  // the first worker's lease ran out
  {
    idem::IdempotencyGuard second{store, key, "fp", options};
    REQUIRE(second.acquired());
    CHECK_THROWS_AS(first.commit(1), idem::LeaseLost);
    // `second` is destroyed without a result: a retryable failure is recorded.
  }
  CHECK(recorder.kinds() == std::vector<EventKind>{EventKind::acquired, EventKind::in_progress,
                                                   EventKind::taken_over, EventKind::lease_lost,
                                                   EventKind::failed});
  CHECK_FALSE(recorder.events[3].error.empty());
}

TEST_CASE_METHOD(ObserverFixture, "observer: store failures are reported with the exception") {
  FlakyStore flaky{{store}};
  flaky.down = true;
  CHECK_THROWS_AS(idem::run_once(
                      flaky, key, "fp", [] { return 1; }, options),
                  idem::StoreError);
  flaky.down = false;
  {
    idem::IdempotencyGuard guard{flaky, key, "fp", options};
    REQUIRE(guard.acquired());
    flaky.down = true;
    CHECK_THROWS_AS(guard.commit(1), idem::StoreError);
    // Still down when the guard is destroyed: its retryable failure cannot be written either.
  }
  CHECK(recorder.kinds() == std::vector<EventKind>{EventKind::store_error, EventKind::acquired,
                                                   EventKind::store_error, EventKind::store_error});
  CHECK(recorder.events[0].error == "flaky: the database went away");
}

TEST_CASE_METHOD(ObserverFixture, "observer: consume_batch reports every claim and result") {
  const std::vector<idem::ClaimRequest> batch{
      {idem::Key{"MQ", "a"}, "fp"}, {idem::Key{"MQ", "b"}, "fp"}, {idem::Key{"MQ", "a"}, "fp"}};
  const auto acks = idem::consume_batch(
      store, batch, [](std::size_t) {}, options);
  CHECK(acks.size() == 3);
  CHECK(recorder.kinds() == std::vector<EventKind>{EventKind::acquired, EventKind::acquired,
                                                   EventKind::in_progress, EventKind::committed,
                                                   EventKind::committed});
}

TEST_CASE("observer: none set means no calls at all") {
  idem::MemoryStore store;
  Recorder recorder;
  CHECK(idem::run_once(store, key, "fp", [] { return 1; }));
  CHECK(recorder.events.empty());
}

TEST_CASE_METHOD(ObserverFixture, "metrics: counts per business type and the duplicate rate") {
  idem::Metrics metrics;
  options.observer = &metrics;
  // 100 payment callbacks, 12 of them duplicates of earlier ones: the incident's rate.
  for (int i = 0; i < 88; ++i) {
    idem::run_once(
        store, idem::Key{"PAY", "T-" + std::to_string(i)}, "fp", [] { return 1; }, options);
  }
  for (int i = 0; i < 12; ++i) {
    idem::run_once(
        store, idem::Key{"PAY", "T-" + std::to_string(i)}, "fp", [] { return 1; }, options);
  }
  idem::run_once(
      store, idem::Key{"REFUND", "R-1"}, "fp", [] { return 1; }, options);
  CHECK(metrics.count("PAY", EventKind::acquired) == 88);
  CHECK(metrics.count("PAY", EventKind::replayed) == 12);
  CHECK(metrics.count("PAY", EventKind::committed) == 88);
  CHECK(metrics.count("REFUND", EventKind::acquired) == 1);
  CHECK(metrics.count("NONE", EventKind::acquired) == 0);
  CHECK(metrics.duplicate_rate("PAY") == Approx(0.12));
  CHECK(metrics.duplicate_rate("REFUND") == 0.0);
  CHECK(metrics.duplicate_rate("NONE") == 0.0);

  const std::string text = metrics.render();
  CHECK_THAT(text, Catch::Contains("idem_requests_total{biz_type=\"PAY\"} 100\n"));
  CHECK_THAT(text, Catch::Contains("idem_duplicates_total{biz_type=\"PAY\"} 12\n"));
  CHECK_THAT(text,
             Catch::Contains("idem_claims_total{biz_type=\"PAY\",verdict=\"replayed\"} 12\n"));
  CHECK_THAT(text,
             Catch::Contains("idem_results_total{biz_type=\"REFUND\",result=\"committed\"} 1\n"));
  CHECK_THAT(text, Catch::Contains(
                       "idem_claim_duration_seconds_bucket{biz_type=\"PAY\",le=\"+Inf\"} 100\n"));
  CHECK_THAT(text, Catch::Contains("idem_claim_duration_seconds_count{biz_type=\"PAY\"} 100\n"));
}

TEST_CASE("metrics: the rendering is valid text exposition format") {
  idem::MemoryStore store;
  idem::Metrics metrics;
  const idem::Options options{.observer = &metrics};
  for (int i = 0; i < 20; ++i)
    idem::run_once(
        store, idem::Key{"A.b-c_1", std::to_string(i % 7)}, "", [] { return 1; }, options);
  std::istringstream lines(metrics.render());
  std::string line;
  int samples = 0;
  std::vector<long> buckets;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK((is_sample(line) || is_comment(line)));
    if (line.rfind("idem_claim_duration_seconds_bucket", 0) == 0)
      buckets.push_back(std::stol(line.substr(line.rfind(' ') + 1)));
    samples += line[0] == '#' ? 0 : 1;
  }
  // requests, claims (six verdicts), duplicates, results, lease lost, the three store error
  // series, cache hits, the histogram; the Janitor's rounds, purged, unfinished purges,
  // released, resolved (three
  // answers) and errors (four jobs, two kinds); its gauges only once a Janitor set them
  CHECK(samples == 1 + 6 + 1 + 2 + 1 + 3 + 1 + 15 + 2 + 4 + 3 + 8);
  REQUIRE(buckets.size() == 15);
  CHECK(std::is_sorted(buckets.begin(), buckets.end()));  // cumulative
  CHECK(buckets.back() == 20);
}

TEST_CASE("metrics: racing threads lose no event", "[race]") {
  idem::MemoryStore store;
  idem::Metrics metrics;
  const idem::Options options{.observer = &metrics};
  constexpr int threads = 8;
  constexpr int calls = 500;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        // Half the keys are shared between all threads, half are the thread's own; business
        // types are created concurrently too.
        const std::string id = i % 2 == 0 ? std::to_string(i) : std::to_string(t * calls + i);
        idem::run_once(
            store, idem::Key{"T" + std::to_string(i % 3), id}, "fp", [] { return 1; }, options);
        if (i % 100 == 0) (void)metrics.render();
      }
    });
  }
  for (auto& th : pool)
    th.join();
  std::uint64_t requests = 0;
  std::uint64_t acquired = 0;
  for (const char* b : {"T0", "T1", "T2"}) {
    for (EventKind k : {EventKind::acquired, EventKind::taken_over, EventKind::replayed,
                        EventKind::in_progress, EventKind::conflict})
      requests += metrics.count(b, k);
    acquired += metrics.count(b, EventKind::acquired);
  }
  CHECK(requests == threads * calls);
  // Each shared key runs once, each thread's own key once.
  CHECK(acquired == calls / 2 + threads * calls / 2);
}

TEST_CASE_METHOD(ObserverFixture,
                 "observer: events carry the fence, the attempts, a failure's reason and the "
                 "caller's context") {
  auto with_context = [&](std::string_view context) {
    idem::Options o = options;
    o.context = context;
    return o;
  };
  const auto seen = [&](std::size_t i) {
    std::lock_guard lock(recorder.mutex);
    return recorder.events.at(i);
  };

  // A business that throws: its guard records a retryable failure; the next request takes the
  // record over, under a new fence, as the second attempt.
  CHECK_THROWS(idem::run_once(
      store, key, "fp", []() -> int { throw std::runtime_error("gateway 502"); },
      with_context("req-1")));
  CHECK(idem::run_once(
            store, key, "fp", [] { return 7; }, with_context("req-2"))
            .value() == 7);
  CHECK(idem::run_once(
            store, key, "fp", [] { return 8; }, with_context("req-3"))
            .value() == 7);
  REQUIRE(recorder.kinds() == std::vector<EventKind>{EventKind::acquired, EventKind::failed,
                                                     EventKind::taken_over, EventKind::committed,
                                                     EventKind::replayed});
  CHECK(seen(0).fence == 1);
  CHECK(seen(0).attempts == 1);
  CHECK(seen(0).context == "req-1");
  CHECK(seen(1).reason == "idem.abandoned");
  CHECK(seen(1).context == "req-1");
  CHECK(seen(2).fence == 2);
  CHECK(seen(2).attempts == 2);
  CHECK(seen(3).fence == 2);
  CHECK(seen(3).reason.empty());
  CHECK(seen(3).context == "req-2");
  CHECK(seen(4).fence == 2);  // the record the replay came from
  CHECK(seen(4).context == "req-3");

  // A permanent failure gives its code as the reason.
  const idem::Key declined{"PAY", "T-declined"};
  CHECK_FALSE(idem::run_once(
      store, declined, "fp",
      []() -> int {
        throw idem::PermanentFailure({{"error", "card_declined"}, {"code", 51}});
      },
      options));
  CHECK(seen(6).kind == EventKind::failed);
  CHECK(seen(6).reason == "card_declined");
  CHECK(seen(6).context.empty());  // none given

  // The guard keeps its own copy: the caller's string may be gone when it reports.
  std::optional<idem::IdempotencyGuard<idem::MemoryStore>> guard;
  {
    std::string context = "req-" + std::string(40, 'x');  // on the heap
    guard.emplace(store, idem::Key{"PAY", "T-copy"}, "fp", with_context(context));
    context.assign(context.size(), '?');
  }
  guard->fail({{"error", "out_of_stock"}}, false);
  CHECK(seen(8).reason == "out_of_stock");
  CHECK(seen(8).context == "req-" + std::string(40, 'x'));
}
