// The events of a with_transaction try, held until it ends (idem/same_transaction/held_events.hpp).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/same_transaction/held_events.hpp>

using idem::EventKind;

namespace {

struct Seen final : idem::Observer {
  struct Event {
    EventKind kind;
    std::string key;
    std::string error;
    std::string reason;
    std::string context;
    std::uint64_t fence;
  };
  std::vector<Event> events;
  void on_event(const idem::Event& e) noexcept override {
    events.push_back({e.kind, std::string(e.biz_type) + "/" + std::string(e.id),
                      e.error != nullptr ? e.error->what() : "", std::string(e.reason),
                      std::string(e.context), e.fence});
  }
  std::vector<EventKind> kinds() const {
    std::vector<EventKind> out;
    for (const Event& e : events)
      out.push_back(e.kind);
    return out;
  }
};

void report(idem::Observer& o, EventKind kind, std::string id,
            const std::exception* error = nullptr) {
  // The strings die with this call: the held copy must not point at them.
  const std::string biz_type = "PAY";
  const std::string context = "trace-0af7651916cd43dd8448eb211c80319c";
  o.on_event(
      idem::Event{kind, biz_type, id, std::chrono::milliseconds{3}, error, 4, 2, {}, context});
}

}  // namespace

TEST_CASE("held_events: answers and results wait - failures go out at once") {
  Seen seen;
  idem::same_transaction::HeldEvents held(&seen);
  CHECK(held.target() == &seen);
  report(held, EventKind::acquired, "a-long-enough-id-to-live-on-the-heap-not-in-sso");
  report(held, EventKind::committed, "a-long-enough-id-to-live-on-the-heap-not-in-sso");
  CHECK(seen.events.empty());
  const std::runtime_error deadlock("deadlock");
  report(held, EventKind::transaction_error, "b", &deadlock);
  REQUIRE(seen.kinds() == std::vector<EventKind>{EventKind::transaction_error});
  CHECK(seen.events[0].error == "deadlock");

  SECTION("a committed try delivers them as they were, in order, once") {
    held.deliver(true);
    CHECK(seen.kinds() == std::vector<EventKind>{EventKind::transaction_error, EventKind::acquired,
                                                 EventKind::committed});
    CHECK(seen.events[1].key == "PAY/a-long-enough-id-to-live-on-the-heap-not-in-sso");
    CHECK(seen.events[1].context == "trace-0af7651916cd43dd8448eb211c80319c");
    CHECK(seen.events[1].fence == 4);
    held.deliver(true);
    CHECK(seen.events.size() == 3);
  }
  SECTION("a try that did not commit kept no success: committed goes out as failed") {
    report(held, EventKind::replayed, "c");
    held.deliver(false);
    CHECK(seen.kinds() == std::vector<EventKind>{EventKind::transaction_error, EventKind::acquired,
                                                 EventKind::failed, EventKind::replayed});
    CHECK(seen.events[2].reason == "idem.rolled_back");
    CHECK(seen.events[3].reason.empty());
  }
  SECTION("a try that failed with a StoreError reports nothing of its own") {
    held.drop();
    held.deliver(true);
    CHECK(seen.kinds() == std::vector<EventKind>{EventKind::transaction_error});
  }
}
