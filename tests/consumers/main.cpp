// Consumer smoke test: the same key run twice executes once and replays the first value.
#include <string>

#include <fmt/format.h>
#include <idem/idem.hpp>

int main() {
  idem::MemoryStore store;
  const idem::Key key{"PAY", "order-42"};
  const std::string fp = idem::fingerprint(nlohmann::json{{"amount", 100}});
  int runs = 0;
  auto first = idem::run_once(store, key, fp, [&] { return ++runs * 7; });
  auto second = idem::run_once(store, key, fp, [&] { return ++runs * 7; });
  fmt::print("first:  {} {}\n", idem::to_string(first.verdict()), first ? first.value() : -1);
  fmt::print("second: {} {}\nbusiness ran {} time(s)\n", idem::to_string(second.verdict()),
             second ? second.value() : -1, runs);
  const bool ok = first.acquired() && first && second.replayed() && second &&
                  second.value() == first.value() && runs == 1;
  return ok ? 0 : 1;
}
