// idem::Janitor on MemoryStore: what a round purges and releases, the paced purge
// (purge_pause), and a prompt stop in the middle of a paced round.
#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <idem/idem.hpp>

using namespace std::chrono_literals;

namespace {

struct Fixture {
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

TEST_CASE_METHOD(Fixture, "janitor: a paced round purges batch by batch, pausing in between") {
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

TEST_CASE_METHOD(Fixture, "janitor: a paced round stops at purge_max_batches") {
  expired(50);
  idem::Janitor janitor(
      store, {.interval = 1h, .purge_batch = 10, .purge_max_batches = 3, .purge_pause = 1ms});
  for (int i = 0; i < 5000 && janitor.stats().rounds == 0; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(janitor.stats().rounds == 1);
  CHECK(janitor.stats().purged == 30);
  CHECK(purge_all() == 20);
}

TEST_CASE_METHOD(Fixture, "janitor: destroying it mid-pause stops the round at once") {
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
