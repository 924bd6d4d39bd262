// idem::CachedStore: what it answers from memory and what it leaves to the store, its bounds,
// its clock, its counters, and its behaviour under threads. The conformance suite runs on it
// too (conformance_memory_test.cpp, and on MySQL in conformance_mysql_test.cpp).
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/cached_store.hpp>
#include <idem/memory_store.hpp>
#include <idem/metrics.hpp>
#include <idem/run_once.hpp>

using namespace std::chrono_literals;

namespace {

// A MemoryStore that counts the calls that reach it.
struct CountingStore {
  idem::MemoryStore& inner;
  std::atomic<int> claims{0}, completes{0}, fails{0};

  idem::ClaimResult claim(const idem::Key& k, std::string_view fp, const idem::Options& o) {
    ++claims;
    return inner.claim(k, fp, o);
  }
  void complete(const idem::Key& k, const idem::Ticket& t, std::string_view s) {
    ++completes;
    inner.complete(k, t, s);
  }
  void fail(const idem::Key& k, const idem::Ticket& t, std::string_view e, bool retryable) {
    ++fails;
    inner.fail(k, t, e, retryable);
  }
  std::optional<idem::Record> find(const idem::Key& k) { return inner.find(k); }
  std::size_t purge_expired(std::size_t b, std::size_t m) { return inner.purge_expired(b, m); }
  std::size_t release_stale(std::size_t b) { return inner.release_stale(b); }
};

struct Setup {
  idem::ManualClock clock;
  idem::MemoryStore memory{[this] { return clock.now(); }};
  CountingStore counting{memory};
  idem::CachedStore<CountingStore> cached;

  explicit Setup(idem::CacheParams p = {}) : cached(counting, with_clock(std::move(p))) {}

  idem::CacheParams with_clock(idem::CacheParams p) {
    p.clock = [this] { return clock.now(); };
    return p;
  }
};

const idem::Options options{.lease = 30s, .ttl = 1h};

}  // namespace

TEST_CASE("cached_store: a duplicate of a finished key is answered without the store") {
  Setup s;
  const idem::Key key{"PAY", "t-1"};
  int runs = 0;
  auto pay = [&] {
    ++runs;
    return std::string("receipt-1");
  };
  CHECK(idem::run_once(s.cached, key, "fp", pay, options).verdict() == idem::Verdict::acquired);
  CHECK(s.counting.claims == 1);
  for (int i = 0; i < 5; ++i) {
    const auto out = idem::run_once(s.cached, key, "fp", pay, options);
    CHECK(out.verdict() == idem::Verdict::replayed);
    REQUIRE(out);
    CHECK(out.value() == "receipt-1");
  }
  CHECK(runs == 1);
  CHECK(s.counting.claims == 1);  // every duplicate was a hit
  const auto stats = s.cached.stats();
  CHECK(stats.hits == 5);
  CHECK(stats.misses == 1);
  CHECK(stats.entries == 1);
  // The cached answer is the stored record, but for the time it was stamped with.
  auto stored = *s.memory.find(key);
  auto answered = s.cached.claim(key, "fp", options).record;
  CHECK(answered.ticket == stored.ticket);
  CHECK(answered.snapshot == stored.snapshot);
  CHECK(answered.expire_at == stored.expire_at);
}

TEST_CASE("cached_store: another payload for a cached key is still a conflict") {
  Setup s;
  const idem::Key key{"PAY", "t-2"};
  const auto c = s.cached.claim(key, "fp-a", options);
  s.cached.complete(key, c.record.ticket, "1");
  const auto other = s.cached.claim(key, "fp-b", options);
  CHECK(other.verdict == idem::Verdict::conflict);
  CHECK(s.counting.claims == 1);
  CHECK(s.cached.stats().hits == 1);
}

TEST_CASE("cached_store: a permanent failure is cached, a retryable one never") {
  Setup s;
  const idem::Key permanent{"PAY", "declined"}, retryable{"PAY", "timeout"};
  const auto p = s.cached.claim(permanent, "fp", options);
  s.cached.fail(permanent, p.record.ticket, R"({"error":"declined"})", false);
  const auto r = s.cached.claim(retryable, "fp", options);
  s.cached.fail(retryable, r.record.ticket, R"({"error":"timeout"})", true);

  CHECK(s.cached.claim(permanent, "fp", options).verdict == idem::Verdict::replayed);
  CHECK(s.counting.claims == 2);
  // The retryable failure goes to the store, which lets it run again.
  const auto again = s.cached.claim(retryable, "fp", options);
  CHECK(again.verdict == idem::Verdict::acquired);
  CHECK(again.record.ticket.fence == 2);
  CHECK(s.counting.claims == 3);
}

TEST_CASE("cached_store: a processing record is never cached") {
  Setup s;
  const idem::Key key{"PAY", "busy"};
  const auto c = s.cached.claim(key, "fp", options);
  REQUIRE(c.verdict == idem::Verdict::acquired);
  CHECK(s.cached.claim(key, "fp", options).verdict == idem::Verdict::in_progress);
  CHECK(s.cached.claim(key, "fp", options).verdict == idem::Verdict::in_progress);
  CHECK(s.counting.claims == 3);
  CHECK(s.cached.stats().entries == 0);
  // Finished by another process (straight on the store): the first duplicate reads it and
  // keeps it, the next is a hit.
  s.memory.complete(key, c.record.ticket, "\"done\"");
  CHECK(s.cached.claim(key, "fp", options).verdict == idem::Verdict::replayed);
  CHECK(s.cached.claim(key, "fp", options).verdict == idem::Verdict::replayed);
  CHECK(s.counting.claims == 4);
}

TEST_CASE("cached_store: an expired record is left to the store, a clock margin early") {
  Setup s({.clock_margin = 2s});
  const idem::Key key{"PAY", "ttl"};
  const idem::Options short_ttl{.lease = 1s, .ttl = 10s};
  const auto c = s.cached.claim(key, "fp", short_ttl);
  s.cached.complete(key, c.record.ticket, "1");
  s.clock.advance(7s);
  CHECK(s.cached.claim(key, "fp", short_ttl).verdict == idem::Verdict::replayed);
  CHECK(s.counting.claims == 1);
  s.clock.advance(1500ms);  // 1.5 s before expire_at: inside the margin
  CHECK(s.cached.claim(key, "fp", short_ttl).verdict == idem::Verdict::replayed);
  CHECK(s.counting.claims == 2);  // the store answered (its record still counts)
  s.clock.advance(2s);            // expired: the store starts afresh
  const auto fresh = s.cached.claim(key, "fp", short_ttl);
  CHECK(fresh.verdict == idem::Verdict::acquired);
  CHECK(s.counting.claims == 3);
}

TEST_CASE("cached_store: a copy older than max_age is read again from the store") {
  Setup s({.max_age = 50ms});
  const idem::Key key{"PAY", "aged"};
  const auto c = s.cached.claim(key, "fp", options);
  s.cached.complete(key, c.record.ticket, "1");
  CHECK(s.cached.claim(key, "fp", options).verdict == idem::Verdict::replayed);
  CHECK(s.counting.claims == 1);
  std::this_thread::sleep_for(80ms);
  CHECK(s.cached.claim(key, "fp", options).verdict == idem::Verdict::replayed);
  CHECK(s.counting.claims == 2);
  // A record changed behind the cache's back is seen once the copy is forgotten.
  s.cached.forget(key);
  CHECK(s.cached.stats().entries == 0);
}

TEST_CASE("cached_store: bounded by entries and bytes, least recently used first") {
  SECTION("entries") {
    Setup s({.max_entries = 3});
    for (int i = 0; i < 4; ++i) {
      const idem::Key key{"PAY", "k" + std::to_string(i)};
      const auto c = s.cached.claim(key, "fp", options);
      s.cached.complete(key, c.record.ticket, "1");
      if (i == 2) {
        // Touch k0, so that k1 is the least recently used when k3 arrives.
        s.cached.claim(idem::Key{"PAY", "k0"}, "fp", options);
      }
    }
    const auto stats = s.cached.stats();
    CHECK(stats.entries == 3);
    CHECK(stats.evictions == 1);
    const int before = s.counting.claims;
    s.cached.claim(idem::Key{"PAY", "k0"}, "fp", options);
    s.cached.claim(idem::Key{"PAY", "k3"}, "fp", options);
    CHECK(s.counting.claims == before);
    s.cached.claim(idem::Key{"PAY", "k1"}, "fp", options);  // evicted: the store answers
    CHECK(s.counting.claims == before + 1);
  }
  SECTION("bytes") {
    Setup s({.max_bytes = 4096});
    const std::string big(1500, 'x');
    for (int i = 0; i < 4; ++i) {
      const idem::Key key{"PAY", "b" + std::to_string(i)};
      const auto c = s.cached.claim(key, "fp", options);
      s.cached.complete(key, c.record.ticket, "\"" + big + "\"");
    }
    const auto stats = s.cached.stats();
    CHECK(stats.bytes <= 4096);
    CHECK(stats.entries == 2);
    CHECK(stats.evictions == 2);
  }
  SECTION("a record larger than the whole cache is not kept") {
    Setup s({.max_bytes = 1024});
    const idem::Key key{"PAY", "huge"};
    const auto c = s.cached.claim(key, "fp", options);
    s.cached.complete(key, c.record.ticket, "\"" + std::string(2000, 'x') + "\"");
    CHECK(s.cached.stats().entries == 0);
  }
}

TEST_CASE("cached_store: bad input is refused on a hit as the store refuses it") {
  Setup s;
  const idem::Key key{"PAY", "bad"};
  const auto c = s.cached.claim(key, "fp", options);
  s.cached.complete(key, c.record.ticket, "1");
  CHECK_THROWS_AS(s.cached.claim(key, "has space", options), idem::InvalidArgument);
  CHECK_THROWS_AS(s.cached.claim(key, "fp", {.lease = 0ms}), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::CachedStore<idem::MemoryStore>(s.memory, {.max_age = 0ms}),
                  idem::InvalidArgument);
  CHECK(s.cached.stats().hits == 0);
}

TEST_CASE("cached_store: a late complete after a takeover is LeaseLost and caches nothing") {
  Setup s;
  const idem::Key key{"PAY", "late"};
  const idem::Options short_lease{.lease = 1s, .ttl = 1h};
  const auto slow = s.cached.claim(key, "fp", short_lease);
  s.clock.advance(2s);
  const auto taker = s.cached.claim(key, "fp", short_lease);
  REQUIRE(taker.verdict == idem::Verdict::acquired);
  CHECK_THROWS_AS(s.cached.complete(key, slow.record.ticket, "\"old\""), idem::LeaseLost);
  CHECK(s.cached.stats().entries == 0);
  s.cached.complete(key, taker.record.ticket, "\"new\"");
  CHECK(s.cached.claim(key, "fp", short_lease).record.snapshot == "\"new\"");
}

TEST_CASE("cached_store: hits are reported to the observer and counted by Metrics") {
  Setup s;
  idem::Metrics metrics;
  const idem::Options observed{.lease = 30s, .ttl = 1h, .observer = &metrics};
  const idem::Key key{"PAY", "seen"};
  for (int i = 0; i < 3; ++i)
    idem::run_once(
        s.cached, key, "fp", [] { return 1; }, observed);
  CHECK(metrics.count("PAY", idem::EventKind::cache_hit) == 2);
  CHECK(metrics.count("PAY", idem::EventKind::replayed) == 2);
  CHECK_THAT(metrics.render(), Catch::Contains("idem_cache_hits_total{biz_type=\"PAY\"} 2"));
}

TEST_CASE("cached_store: 16 threads on 50 keys execute each once - hits never run anything") {
  idem::MemoryStore memory;
  idem::CachedStore<idem::MemoryStore> cached(memory, {.max_entries = 20});  // evicting too
  std::atomic<int> executions{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2'000; ++i) {
        const int k = (i * 7 + t) % 50;
        const idem::Key key{"PAY", "k" + std::to_string(k)};
        const auto out = idem::run_once(cached, key, "fp", [&] {
          ++executions;
          return k;
        });
        if (out.verdict() == idem::Verdict::in_progress) continue;
        if (!out || out.value() != k) ++wrong;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(executions == 50);
  CHECK(wrong == 0);
  const auto stats = cached.stats();
  CHECK(stats.hits > 0);
  CHECK(stats.entries <= 20);
  CHECK(stats.hits + stats.misses == 16u * 2'000u);
}
