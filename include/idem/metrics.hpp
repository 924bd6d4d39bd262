#pragma once
// idem::Metrics: a ready Observer that counts what the guard reports, per business type, and
// renders it in the Prometheus text exposition format (version 0.0.4).
//
//   idem::Metrics metrics;
//   idem::Options options{.observer = &metrics};
//   ...
//   http_get("/metrics", [&] { return metrics.render(); });  // Content-Type: text/plain;
//   version=0.0.4
//
// Series (each labelled biz_type="..."):
//   idem_requests_total                    claims answered (one per guarded request)
//   idem_claims_total{verdict=...}         by answer: acquired, taken_over, replayed,
//                                          in_progress, conflict
//   idem_duplicates_total                  replayed + in_progress + conflict
//   idem_results_total{result=...}         committed, failed
//   idem_lease_lost_total
//   idem_store_errors_total                store failures that reached the caller: alert on it
//   idem_store_errors_retried_total        transactions with_transaction rolled back and ran
//                                          again (deadlocks between duplicates are normal)
//   idem_transaction_errors_total          bound-store operations that failed in a transaction
//   idem_cache_hits_total                  claims idem::CachedStore answered from memory
//   idem_claim_duration_seconds            histogram of the claim latency (waits included)
//   idem_outcome_unknown_records           gauge: records in outcome_unknown, as the Janitor's
//                                          last resolver pass saw them (JanitorParams::metrics)
// and, from a Janitor given this object (JanitorParams::metrics), without biz_type:
//   idem_janitor_rounds_total, idem_janitor_purged_total, idem_janitor_released_total
//   idem_janitor_purge_unfinished_total    rounds that left expired records (purge behind)
//   idem_janitor_resolved_total{answer=happened|not_happened|unknown}
//   idem_janitor_errors_total{task=purge|release|list|repair,kind=retryable|permanent}
//   idem_janitor_last_round_timestamp_seconds  gauge: when its last round ended (Unix time)
//   idem_stale_claims                      gauge: claims whose lease ran out, as its last
//                                          round found them (listing stores; at most a batch)
// The duplicate rate to watch (normally 1-2%; 12% and more during a retry storm):
//   rate(idem_duplicates_total[5m]) / rate(idem_requests_total[5m])
// and the alert on failures a client saw: increase(idem_store_errors_total[5m]) > 0
//
// Thread-safe: counters are atomics; a business type's series is created on its first event
// under a lock, later events only read-lock the map. Business types are few by design; each
// one costs a few hundred bytes for the life of the Metrics object.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/observer.hpp"

namespace idem {

class Metrics final : public Observer {
 public:
  // Upper bounds of the claim latency histogram, in seconds (+Inf is implied).
  static constexpr std::array<double, 14> buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};

  void on_event(const Event& event) noexcept override {
    Series* s = series(event.biz_type);
    if (s == nullptr) return;  // out of memory: drop the event rather than fail the request
    s->events[static_cast<std::size_t>(event.kind)].fetch_add(1, std::memory_order_relaxed);
    if (!is_claim_answer(event.kind)) return;
    const auto ns = static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, static_cast<std::int64_t>(event.latency.count())));
    const double seconds = static_cast<double>(ns) / 1e9;
    std::size_t b = 0;
    while (b < buckets.size() && seconds > buckets[b])
      ++b;
    s->latency_buckets[b].fetch_add(1, std::memory_order_relaxed);
    s->latency_ns.fetch_add(ns, std::memory_order_relaxed);
  }

  // How many events of this kind were reported for this business type.
  std::uint64_t count(std::string_view biz_type, EventKind kind) const {
    const Series* s = find(biz_type);
    return s ? s->events[static_cast<std::size_t>(kind)].load(std::memory_order_relaxed) : 0;
  }

  // The gauge of records waiting in outcome_unknown (docs/recovery.md), set by the Janitor's
  // resolver pass for each biz_type it has a resolver for.
  void outcome_unknown_records(std::string_view biz_type, std::uint64_t n) noexcept {
    if (Series* s = series(biz_type)) {
      s->unknown_records.store(static_cast<std::int64_t>(n), std::memory_order_relaxed);
    }
  }

  // What a Janitor did (JanitorParams::metrics). One Janitor per Metrics object: a second one
  // adds to the same counters, and the gauges show whichever ended a round last.
  class JanitorCounters {
   public:
    enum class Task { purge, release, list, repair };
    enum class Answer { happened, not_happened, unknown };

    void purged(std::uint64_t n) noexcept { purged_.fetch_add(n, std::memory_order_relaxed); }
    void purge_unfinished() noexcept { purge_unfinished_.fetch_add(1, std::memory_order_relaxed); }
    void released(std::uint64_t n) noexcept { released_.fetch_add(n, std::memory_order_relaxed); }
    void resolved(Answer a) noexcept {
      resolved_[static_cast<std::size_t>(a)].fetch_add(1, std::memory_order_relaxed);
    }
    // A failure of one task of a round; `retryable`: StoreError::retryable() (a transient
    // database failure), otherwise permanent (a bug, a corrupt record, a table not as expected).
    void failed(Task task, bool retryable) noexcept {
      errors_[static_cast<std::size_t>(task)][retryable ? 0 : 1].fetch_add(
          1, std::memory_order_relaxed);
    }
    void stale_claims(std::uint64_t n) noexcept {
      stale_.store(static_cast<std::int64_t>(n), std::memory_order_relaxed);
    }
    void round_ended(std::chrono::system_clock::time_point at) noexcept {
      rounds_.fetch_add(1, std::memory_order_relaxed);
      last_round_ms_.store(
          std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count(),
          std::memory_order_relaxed);
    }

    std::uint64_t rounds() const noexcept { return rounds_.load(std::memory_order_relaxed); }
    std::uint64_t errors(Task task, bool retryable) const noexcept {
      return errors_[static_cast<std::size_t>(task)][retryable ? 0 : 1].load(
          std::memory_order_relaxed);
    }

   private:
    friend class Metrics;
    std::atomic<std::uint64_t> rounds_{0}, purged_{0}, released_{0}, purge_unfinished_{0};
    std::array<std::atomic<std::uint64_t>, 3> resolved_{};
    std::array<std::array<std::atomic<std::uint64_t>, 2>, 4> errors_{};
    std::atomic<std::int64_t> stale_{-1};          // -1: never set, not rendered
    std::atomic<std::int64_t> last_round_ms_{-1};  // -1: no round yet, not rendered
  };
  JanitorCounters& janitor() noexcept { return janitor_; }
  const JanitorCounters& janitor() const noexcept { return janitor_; }

  // Duplicates / requests since this object was made (0 without requests). For alerting,
  // prefer the rate over a window that the Prometheus expression above gives.
  double duplicate_rate(std::string_view biz_type) const {
    const Series* s = find(biz_type);
    if (s == nullptr) return 0.0;
    const Totals t = totals(*s);
    return t.requests == 0 ? 0.0
                           : static_cast<double>(t.duplicates) / static_cast<double>(t.requests);
  }

  // The text exposition format, every series of every business type seen so far.
  std::string render() const {
    std::shared_lock lock(mutex_);
    std::string out;
    auto header = [&](std::string_view name, std::string_view type, std::string_view help) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    auto each = [&](auto&& line) {
      for (const auto& [biz_type, s] : series_)
        line(escape(biz_type), *s);
    };
    header("idem_requests_total", "counter", "Guarded requests whose claim was answered.");
    each([&](const std::string& b, const Series& s) {
      out += fmt::format("idem_requests_total{{biz_type=\"{}\"}} {}\n", b, totals(s).requests);
    });
    header("idem_claims_total", "counter", "Claim answers by verdict.");
    each([&](const std::string& b, const Series& s) {
      for (EventKind k :
           {EventKind::acquired, EventKind::taken_over, EventKind::replayed, EventKind::in_progress,
            EventKind::conflict, EventKind::outcome_unknown}) {
        out += fmt::format("idem_claims_total{{biz_type=\"{}\",verdict=\"{}\"}} {}\n", b,
                           to_string(k), load(s, k));
      }
    });
    header("idem_duplicates_total", "counter",
           "Requests answered as duplicates (replayed, in_progress, conflict or "
           "outcome_unknown).");
    each([&](const std::string& b, const Series& s) {
      out += fmt::format("idem_duplicates_total{{biz_type=\"{}\"}} {}\n", b, totals(s).duplicates);
    });
    header("idem_results_total", "counter", "Results recorded by the business owner.");
    each([&](const std::string& b, const Series& s) {
      for (EventKind k : {EventKind::committed, EventKind::failed}) {
        out += fmt::format("idem_results_total{{biz_type=\"{}\",result=\"{}\"}} {}\n", b,
                           to_string(k), load(s, k));
      }
    });
    auto counter = [&](std::string_view name, EventKind k, std::string_view help) {
      header(name, "counter", help);
      each([&](const std::string& b, const Series& s) {
        out += fmt::format("{}{{biz_type=\"{}\"}} {}\n", name, b, load(s, k));
      });
    };
    counter("idem_lease_lost_total", EventKind::lease_lost,
            "Results refused because the claim was taken over first (lease too short?).");
    counter("idem_store_errors_total", EventKind::store_error,
            "Store failures (idem::StoreError) that reached the caller.");
    counter("idem_store_errors_retried_total", EventKind::transaction_retried,
            "Transactions rolled back after a transient failure and run again by "
            "with_transaction.");
    counter("idem_transaction_errors_total", EventKind::transaction_error,
            "Bound-store operations that failed inside the caller's transaction.");
    counter("idem_cache_hits_total", EventKind::cache_hit,
            "Claims idem::CachedStore answered from memory, without the store.");
    header("idem_outcome_unknown_records", "gauge",
           "Records in outcome_unknown at the Janitor's last resolver pass: each waits for a "
           "resolver's answer or an operator's repair.");
    each([&](const std::string& b, const Series& s) {
      const std::int64_t n = s.unknown_records.load(std::memory_order_relaxed);
      if (n >= 0) out += fmt::format("idem_outcome_unknown_records{{biz_type=\"{}\"}} {}\n", b, n);
    });
    render_janitor(out, header);
    header("idem_claim_duration_seconds", "histogram", "Claim latency, waits included.");
    each([&](const std::string& b, const Series& s) {
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i <= buckets.size(); ++i) {
        cumulative += s.latency_buckets[i].load(std::memory_order_relaxed);
        const std::string le = i < buckets.size() ? fmt::format("{}", buckets[i]) : "+Inf";
        out += fmt::format("idem_claim_duration_seconds_bucket{{biz_type=\"{}\",le=\"{}\"}} {}\n",
                           b, le, cumulative);
      }
      out += fmt::format("idem_claim_duration_seconds_sum{{biz_type=\"{}\"}} {}\n", b,
                         static_cast<double>(s.latency_ns.load(std::memory_order_relaxed)) / 1e9);
      out +=
          fmt::format("idem_claim_duration_seconds_count{{biz_type=\"{}\"}} {}\n", b, cumulative);
    });
    return out;
  }

 private:
  static constexpr std::size_t kinds = static_cast<std::size_t>(EventKind::outcome_unknown) + 1;

  struct Series {
    std::array<std::atomic<std::uint64_t>, kinds> events{};
    std::array<std::atomic<std::uint64_t>, buckets.size() + 1> latency_buckets{};
    std::atomic<std::uint64_t> latency_ns{0};
    std::atomic<std::int64_t> unknown_records{-1};  // -1: never set, not rendered
  };

  struct Totals {
    std::uint64_t requests = 0;
    std::uint64_t duplicates = 0;
  };

  template <class Header>
  void render_janitor(std::string& out, Header& header) const {
    const JanitorCounters& j = janitor_;
    const auto get = [](const std::atomic<std::uint64_t>& a) {
      return a.load(std::memory_order_relaxed);
    };
    header("idem_janitor_rounds_total", "counter", "Rounds the Janitor finished.");
    out += fmt::format("idem_janitor_rounds_total {}\n", get(j.rounds_));
    header("idem_janitor_purged_total", "counter", "Expired records the Janitor deleted.");
    out += fmt::format("idem_janitor_purged_total {}\n", get(j.purged_));
    header("idem_janitor_purge_unfinished_total", "counter",
           "Rounds whose purge stopped at purge_max_batches with expired records left.");
    out += fmt::format("idem_janitor_purge_unfinished_total {}\n", get(j.purge_unfinished_));
    header("idem_janitor_released_total", "counter",
           "Claims whose lease ran out that the Janitor released for a retry.");
    out += fmt::format("idem_janitor_released_total {}\n", get(j.released_));
    header("idem_janitor_resolved_total", "counter",
           "Stale or outcome-unknown records a resolver answered, by answer.");
    constexpr std::array<std::string_view, 3> answers{"happened", "not_happened", "unknown"};
    for (std::size_t a = 0; a < answers.size(); ++a) {
      out += fmt::format("idem_janitor_resolved_total{{answer=\"{}\"}} {}\n", answers[a],
                         get(j.resolved_[a]));
    }
    header("idem_janitor_errors_total", "counter",
           "Janitor tasks that failed, by task and kind (retryable: the database; permanent: look "
           "at the logs).");
    // `task`, not `job`: Prometheus' target label `job` would rename ours to exported_job.
    constexpr std::array<std::string_view, 4> tasks{"purge", "release", "list", "repair"};
    for (std::size_t task = 0; task < tasks.size(); ++task) {
      for (std::size_t k = 0; k < 2; ++k) {
        out += fmt::format("idem_janitor_errors_total{{task=\"{}\",kind=\"{}\"}} {}\n", tasks[task],
                           k == 0 ? "retryable" : "permanent", get(j.errors_[task][k]));
      }
    }
    if (const auto ms = j.last_round_ms_.load(std::memory_order_relaxed); ms >= 0) {
      header("idem_janitor_last_round_timestamp_seconds", "gauge",
             "When the Janitor's last round ended, in seconds since the Unix epoch.");
      out +=
          fmt::format("idem_janitor_last_round_timestamp_seconds {}.{:03}\n", ms / 1000, ms % 1000);
    }
    if (const auto n = j.stale_.load(std::memory_order_relaxed); n >= 0) {
      header("idem_stale_claims", "gauge",
             "Claims whose lease ran out, as the Janitor's last round found them (at most a "
             "batch).");
      out += fmt::format("idem_stale_claims {}\n", n);
    }
  }

  static std::uint64_t load(const Series& s, EventKind k) {
    return s.events[static_cast<std::size_t>(k)].load(std::memory_order_relaxed);
  }

  static Totals totals(const Series& s) {
    const std::uint64_t dup = load(s, EventKind::replayed) + load(s, EventKind::in_progress) +
                              load(s, EventKind::conflict) + load(s, EventKind::outcome_unknown);
    return {dup + load(s, EventKind::acquired) + load(s, EventKind::taken_over), dup};
  }

  // Label values escape backslash, double quote and newline (business types never hold them,
  // but the format is kept valid whatever reaches it).
  static std::string escape(std::string_view v) {
    std::string out;
    for (char c : v) {
      if (c == '\\' || c == '"') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    return out;
  }

  const Series* find(std::string_view biz_type) const {
    std::shared_lock lock(mutex_);
    auto it = series_.find(biz_type);
    return it == series_.end() ? nullptr : it->second.get();
  }

  Series* series(std::string_view biz_type) noexcept {
    {
      std::shared_lock lock(mutex_);
      if (auto it = series_.find(biz_type); it != series_.end()) return it->second.get();
    }
    try {
      auto fresh = std::make_unique<Series>();
      std::unique_lock lock(mutex_);
      // Another thread may have created it meanwhile: then `fresh` is simply dropped.
      return series_.try_emplace(std::string(biz_type), std::move(fresh)).first->second.get();
    } catch (...) {
      return nullptr;
    }
  }

  mutable std::shared_mutex mutex_;
  std::map<std::string, std::unique_ptr<Series>, std::less<>> series_;  // sorted: stable output
  JanitorCounters janitor_;
};

}  // namespace idem
