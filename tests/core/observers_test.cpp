// Several observers behind Options::observer (idem/observers.hpp): every event reaches each of
// them, in the order given, and the metrics counted through the set are the metrics counted
// alone.
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/memory_store.hpp>
#include <idem/metrics.hpp>
#include <idem/observers.hpp>
#include <idem/run_once.hpp>

namespace {

// Notes each event with its own name, into a log the two observers share.
struct Noting final : idem::Observer {
  Noting(std::string n, std::vector<std::string>& l) : name(std::move(n)), log(l) {}
  void on_event(const idem::Event& e) noexcept override {
    log.push_back(name + ":" + std::string(idem::to_string(e.kind)) + ":" + std::string(e.id));
  }
  std::string name;
  std::vector<std::string>& log;
};

}  // namespace

TEST_CASE("observers: each event reaches every observer, in the order given") {
  std::vector<std::string> log;
  Noting first{"a", log};
  Noting second{"b", log};
  idem::Metrics metrics;
  idem::Observers all{&first, &second, &metrics};
  CHECK(all.size() == 3);

  idem::MemoryStore store;
  const idem::Options options{.observer = &all};
  const idem::Key key{"PAY", "o-1"};
  for (int i = 0; i < 2; ++i) {
    const auto out = idem::run_once(
        store, key, "fp", [] { return 1; }, options);
    CHECK(out.value() == 1);
  }
  CHECK(log == std::vector<std::string>{"a:acquired:o-1", "b:acquired:o-1", "a:committed:o-1",
                                        "b:committed:o-1", "a:replayed:o-1", "b:replayed:o-1"});
  CHECK(metrics.count("PAY", idem::EventKind::acquired) == 1);
  CHECK(metrics.count("PAY", idem::EventKind::committed) == 1);
  CHECK(metrics.count("PAY", idem::EventKind::replayed) == 1);
}

TEST_CASE("observers: a null observer is refused when the set is made") {
  std::vector<std::string> log;
  Noting one{"a", log};
  CHECK_THROWS_AS((idem::Observers{&one, nullptr}), idem::InvalidArgument);
  CHECK_NOTHROW(idem::Observers{});
}
