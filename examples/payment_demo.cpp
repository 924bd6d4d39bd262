// The articles' incident, replayed: a gateway retries notifyPayResult callbacks after a
// deploy hiccup. 11 orders receive 58 callbacks (47 of them duplicates) from 8 threads at
// once; the gateway retries a callback answered "in progress" up to 3 times, 200 ms apart.
// The handler is guarded by idem, so each order is marked paid exactly once.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <idem/idem.hpp>

namespace {

struct Callback {
  std::string trade_no;  // the channel's trade number: the idempotency key
  long amount_fen = 0;
};

struct Ledger {
  std::mutex mutex;
  std::vector<std::string> credits;  // one entry per executed "mark paid + credit merchant"
};

struct Counters {
  std::atomic<int> executed{0}, replayed{0}, in_progress{0}, conflict{0}, gave_up{0};
};

// The handler the gateway calls. Returns the HTTP status it would answer.
int notify_pay_result(idem::MemoryStore& store, Ledger& ledger, Counters& counters,
                      const Callback& cb) {
  const idem::Key key{"PAY", cb.trade_no};
  const auto fp =
      idem::fingerprint(nlohmann::json{{"trade_no", cb.trade_no}, {"amount_fen", cb.amount_fen}});
  idem::IdempotencyGuard guard{store, key, fp, idem::Options{.lease = std::chrono::seconds{30}}};
  switch (guard.verdict()) {
    case idem::Verdict::acquired: {
      std::this_thread::sleep_for(
          std::chrono::milliseconds{30});  // the order update + channel call
      {
        std::lock_guard lock(ledger.mutex);
        ledger.credits.push_back(cb.trade_no);
      }
      guard.commit(nlohmann::json{{"trade_no", cb.trade_no}, {"status", "paid"}});
      ++counters.executed;
      return 200;
    }
    case idem::Verdict::replayed:
      ++counters.replayed;
      return 200;  // the first answer, again
    case idem::Verdict::in_progress:
      ++counters.in_progress;
      return 409;  // "still processing": the gateway will retry
    case idem::Verdict::conflict:
      ++counters.conflict;
      return 422;
  }
  return 500;
}

}  // namespace

int main() {
  constexpr int orders = 11;
  constexpr int duplicates = 47;

  std::vector<Callback> callbacks;
  for (int i = 0; i < orders; ++i)
    callbacks.push_back({"CH2026113017" + std::to_string(1000 + i), 29'900});
  std::mt19937 rng(47);
  for (int d = 0; d < duplicates; ++d)
    callbacks.push_back(callbacks[rng() % orders]);
  std::shuffle(callbacks.begin(), callbacks.end(), rng);

  idem::MemoryStore store;
  Ledger ledger;
  Counters counters;
  std::atomic<std::size_t> next{0};
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> gateway;
  for (int t = 0; t < 8; ++t) {
    gateway.emplace_back([&] {
      for (std::size_t i = next++; i < callbacks.size(); i = next++) {
        int status = notify_pay_result(store, ledger, counters, callbacks[i]);
        for (int retry = 0; status == 409 && retry < 3; ++retry) {
          std::this_thread::sleep_for(std::chrono::milliseconds{200});
          status = notify_pay_result(store, ledger, counters, callbacks[i]);
        }
        if (status != 200) ++counters.gave_up;
      }
    });
  }
  for (auto& th : gateway)
    th.join();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);

  std::vector<std::string> credited = ledger.credits;
  std::sort(credited.begin(), credited.end());
  const auto unique_end = std::unique(credited.begin(), credited.end());
  const long double_credits =
      static_cast<long>(ledger.credits.size()) - (unique_end - credited.begin());

  std::printf("idem payment-callback demo (store: MemoryStore)\n");
  std::printf("  orders:                 %d\n", orders);
  std::printf("  callbacks delivered:    %zu (%d duplicates), 8 gateway threads\n",
              callbacks.size(), duplicates);
  std::printf("  executed:               %d\n", counters.executed.load());
  std::printf("  replayed:               %d\n", counters.replayed.load());
  std::printf("  answered in progress:   %d (retried by the gateway)\n",
              counters.in_progress.load());
  std::printf("  conflicts:              %d\n", counters.conflict.load());
  std::printf("  gave up:                %d\n", counters.gave_up.load());
  std::printf("  double credits:         %ld\n", double_credits);
  std::printf("  took:                   %lld ms\n", static_cast<long long>(ms.count()));
  const bool ok = counters.executed == orders && double_credits == 0 && counters.gave_up == 0;
  std::printf("%s\n", ok ? "OK: every order was processed exactly once"
                         : "FAILED: the business ran more than once");
  return ok ? 0 : 1;
}
