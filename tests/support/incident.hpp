#pragma once
// The articles' incident, as the state machine tests of every SQL backend replay it: a gateway
// hiccup delivers 58 "paid" callbacks for 11 orders (47 duplicates), concurrently, and the
// buggy gateway flow follows every callback with a refund attempt for the same order. Each
// attempt carries its own refund request id (the gateway made one up per attempt, the
// "server-generated id" mistake), so the REFUND guard cannot tell them apart: only a guarded
// state change can stop the second refund.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace idem_test {

struct Incident {
  static constexpr int orders = 11;
  static constexpr int duplicates = 47;

  struct Callback {
    std::string trade_no;  // the channel's trade number: the PAY idempotency key
    std::string order_no;
  };
  std::vector<Callback> callbacks;

  static std::string order_no(int i) { return "A2026113017" + std::to_string(100 + i); }

  Incident() {
    std::vector<Callback> originals;
    for (int i = 0; i < orders; ++i)
      originals.push_back({"CH2026113017" + std::to_string(1000 + i), order_no(i)});
    callbacks = originals;
    std::mt19937 rng(47);
    for (int d = 0; d < duplicates; ++d)
      callbacks.push_back(originals[rng() % orders]);
    std::shuffle(callbacks.begin(), callbacks.end(), rng);
  }
};

}  // namespace idem_test
