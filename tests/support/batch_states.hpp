#pragma once
// The stored states a batch claim meets, prepared on any store by single claims, shared by the
// claim_batch tests of every backend: a batch must answer each request exactly as one claim
// after another would.
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <idem/store.hpp>

namespace idem_test {

inline idem::Key batch_key(int i) {
  return idem::Key{"mq.order", "msg-" + std::to_string(i)};
}

// What a claim answered: verdict + status + fence + attempts + whether a crashed attempt was
// taken over.
struct Seen {
  idem::Verdict verdict;
  idem::Status status;
  std::uint64_t fence;
  std::uint32_t attempts;
  bool after_crash;
  bool operator==(const Seen&) const = default;
};

inline Seen seen(const idem::ClaimResult& r) {
  return {r.verdict, r.record.status, r.record.ticket.fence, r.record.attempts, r.after_crash};
}

// Prepares, on a fresh table, one key per interesting stored state; returns the batch that
// visits every state, twice for some keys and with a foreign fingerprint for others.
template <class Store>
std::vector<idem::ClaimRequest> prepare_batch_states(Store& store) {
  using namespace std::chrono_literals;
  const auto key = batch_key;
  const idem::Options quick{.lease = 50ms, .ttl = 60s};
  const idem::Options expiring{.lease = 50ms, .ttl = 60ms};
  // 0: succeeded -> replay; 1: processing, live lease -> in_progress; 2: failed retryable ->
  // takeover; 3: failed permanent -> replay; 4: processing, lease run out -> takeover;
  // 5: expired -> takeover as new; 6..: absent -> acquired.
  auto c0 = store.claim(key(0), "fp", {});
  store.complete(key(0), c0.record.ticket, R"({"ok":true})");
  store.claim(key(1), "fp", {});
  auto c2 = store.claim(key(2), "fp", {});
  store.fail(key(2), c2.record.ticket, R"({"error":"timeout"})", true);
  auto c3 = store.claim(key(3), "fp", {});
  store.fail(key(3), c3.record.ticket, R"({"error":"declined"})", false);
  store.claim(key(4), "fp", quick);
  auto c5 = store.claim(key(5), "fp", expiring);
  store.complete(key(5), c5.record.ticket, R"({"old":true})");
  std::this_thread::sleep_for(150ms);  // key 4's lease and key 5's ttl run out

  std::vector<idem::ClaimRequest> batch;
  for (int i = 0; i < 8; ++i)
    batch.push_back({key(i), "fp"});
  batch.push_back({key(0), "other"});  // conflict with a stored success
  batch.push_back({key(6), "fp"});     // repeat of a key this batch acquires: in_progress
  batch.push_back({key(7), "other"});  // repeat with another payload: conflict
  batch.push_back({key(8), ""});       // no fingerprint: never a conflict
  batch.push_back({key(2), "fp"});     // repeat of a takeover: in_progress
  return batch;
}

// The verdicts of prepare_batch_states' batch, in its order.
inline const std::vector<idem::Verdict>& batch_state_verdicts() {
  using idem::Verdict;
  static const std::vector<Verdict> verdicts{
      Verdict::replayed,   Verdict::in_progress, Verdict::acquired, Verdict::replayed,
      Verdict::acquired,   Verdict::acquired,    Verdict::acquired, Verdict::acquired,
      Verdict::conflict,   Verdict::in_progress, Verdict::conflict, Verdict::acquired,
      Verdict::in_progress};
  return verdicts;
}

}  // namespace idem_test
