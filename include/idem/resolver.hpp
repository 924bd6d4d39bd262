#pragma once
// idem::Resolvers: what the service knows about its effects outside the store. When a worker
// died between such an effect (a charge at a payment gateway) and its record, the record stays
// processing until its lease runs out; re-running the business then could repeat the effect.
// A resolver, registered per biz_type, looks the business up instead ("was trade T charged?")
// and answers one of three:
//
//   happened(response)  the effect took place: the record becomes succeeded with `response`,
//                       and duplicates replay it; the business never runs again
//   not_happened()      it did not: the business may run (again)
//   unknown(why)        nobody can tell now (the gateway is down, the answer is ambiguous):
//                       the record becomes outcome_unknown; nothing runs, nothing is replayed,
//                       until a later resolver pass or an operator's repair settles it
//
//   idem::Resolvers resolvers;
//   resolvers.add("PAY", [&](const idem::Record& r, const idem::ResolveContext& ctx) {
//     const auto charged = gateway.charged(r.key.id(), ctx.deadline);   // a lookup, not a charge
//     if (!charged) return idem::Resolution::unknown("gateway unreachable");
//     return *charged ? idem::Resolution::happened(json{{"status", "paid"}})
//                     : idem::Resolution::not_happened();
//   });
//   idem::Options options{.resolvers = &resolvers};                    // on the claim path
//   idem::Janitor janitor{store, {.resolvers = &resolvers}};           // and in housekeeping
//
// A resolver that throws, or that has not answered by its time limit, counts as unknown. It
// runs on a thread of its own, so the caller waits at most the time limit; one that overruns
// keeps running until it returns (its answer is dropped), so give its lookups their own
// timeouts (ctx.deadline). Add every resolver before the object is shared; then it is read-only
// and may be used from any thread. docs/recovery.md says where resolvers run and what they cost.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/clock.hpp"
#include "idem/detail/snapshot.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/record.hpp"
#include "idem/repair.hpp"
#include "idem/serializable.hpp"

namespace idem {

class Resolution {
 public:
  enum class Kind { happened, not_happened, unknown };

  // The effect took place; `response` is what duplicates will be answered with.
  template <Serializable T>
  static Resolution happened(const T& response) {
    return Resolution(Kind::happened, detail::encode_snapshot(response));
  }
  static Resolution not_happened() { return Resolution(Kind::not_happened, {}); }
  static Resolution unknown(std::string_view why) {
    return Resolution(Kind::unknown,
                      nlohmann::json{{"error", "idem.outcome_unknown"}, {"detail", why}}.dump(
                          -1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

  Kind kind() const noexcept { return kind_; }
  // happened: the response (JSON text); unknown: what is known, as an error (JSON text).
  const std::string& snapshot() const noexcept { return snapshot_; }

 private:
  Resolution(Kind kind, std::string snapshot) : kind_(kind), snapshot_(std::move(snapshot)) {}
  Kind kind_;
  std::string snapshot_;
};

constexpr std::string_view to_string(Resolution::Kind k) noexcept {
  switch (k) {
    case Resolution::Kind::happened:
      return "happened";
    case Resolution::Kind::not_happened:
      return "not_happened";
    case Resolution::Kind::unknown:
      return "unknown";
  }
  return "unknown";
}

struct ResolveContext {
  // When the caller stops waiting: the resolver's own lookups should give up by then.
  std::chrono::steady_clock::time_point deadline;
};

using Resolver = std::function<Resolution(const Record&, const ResolveContext&)>;

struct ResolverParams {
  // How long a caller waits for this resolver's answer; past it the answer is unknown.
  std::chrono::milliseconds time_limit{std::chrono::seconds{5}};
};

struct ResolversParams {
  // Resolver calls running at once, overrunning ones included; past it a call answers unknown
  // at once instead of starting one more thread (a hung gateway must not pile threads up).
  std::size_t max_running = 16;
};

class Resolvers {
 public:
  Resolvers() : Resolvers(ResolversParams{}) {}
  explicit Resolvers(ResolversParams params) : max_running_(params.max_running) {
    if (max_running_ == 0) {
      throw InvalidArgument("idem::Resolvers: max_running must be at least 1");
    }
  }

  Resolvers(const Resolvers&) = delete;
  Resolvers& operator=(const Resolvers&) = delete;

  // Registers the resolver of `biz_type`. Throws InvalidArgument for a bad biz_type, an empty
  // function, a time limit that is not positive, or a biz_type that already has one.
  void add(std::string biz_type, Resolver resolver, ResolverParams params = {}) {
    detail::validate_biz_type(biz_type);
    if (!resolver) throw InvalidArgument("idem::Resolvers::add: the resolver is empty");
    if (params.time_limit <= std::chrono::milliseconds::zero()) {
      throw InvalidArgument("idem::Resolvers::add: time_limit must be positive");
    }
    const auto [it, added] = entries_.try_emplace(std::move(biz_type), std::move(resolver), params);
    if (!added) {
      throw InvalidArgument(
          fmt::format("idem::Resolvers::add: {} already has a resolver", it->first));
    }
  }

  bool covers(std::string_view biz_type) const { return entries_.find(biz_type) != entries_.end(); }

  // After the store was restored from a backup it may have forgotten records that finished
  // after the backup was taken: a duplicate of such a request finds no record, claims afresh
  // and would repeat the effect. Until `until` (the restore time plus the longest time a
  // caller keeps retrying), every acquired claim of a covered biz_type asks its resolver
  // first, fresh or not. docs/recovery.md has the runbook. Safe to call at any time, from any
  // thread.
  void ask_every_claim_until(TimePoint until) noexcept {
    every_claim_until_.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  }

  // Whether an acquired claim of this biz_type asks its resolver before the business runs:
  // when it resumed a crashed attempt, or during an ask_every_claim_until() window.
  bool asks(std::string_view biz_type, bool after_crash, TimePoint now) const {
    if (!covers(biz_type)) return false;
    return after_crash ||
           now.time_since_epoch().count() < every_claim_until_.load(std::memory_order_relaxed);
  }

  std::vector<std::string> biz_types() const {
    std::vector<std::string> types;
    for (const auto& [type, entry] : entries_)
      types.push_back(type);
    return types;
  }

  // The resolver's answer for `record`, waited for at most its time limit. Never throws: a
  // resolver that throws, overruns or is missing answers unknown, saying why.
  Resolution resolve(const Record& record) const noexcept {
    try {
      const auto it = entries_.find(record.key.biz_type());
      if (it == entries_.end()) return Resolution::unknown("no resolver for this biz_type");
      return run_bounded(it->second, record);
    } catch (const std::exception& e) {
      return Resolution::unknown(fmt::format("the resolver could not be run: {}", e.what()));
    } catch (...) {
      return Resolution::unknown("the resolver could not be run");
    }
  }

 private:
  struct Entry {
    Entry(Resolver r, ResolverParams p)
        : resolver(std::make_shared<Resolver>(std::move(r))), params(p) {}
    std::shared_ptr<Resolver> resolver;  // shared with calls that outlive their caller
    ResolverParams params;
  };

  // What one call shares with the thread that runs it.
  struct Call {
    std::mutex mutex;
    std::condition_variable answered;
    std::optional<Resolution> answer;
  };

  Resolution run_bounded(const Entry& entry, const Record& record) const {
    if (running_->fetch_add(1) >= max_running_) {
      running_->fetch_sub(1);
      return Resolution::unknown(fmt::format("{} resolver calls are still running", max_running_));
    }
    const auto deadline = std::chrono::steady_clock::now() + entry.params.time_limit;
    auto call = std::make_shared<Call>();
    try {
      std::thread([call, resolver = entry.resolver, record, ctx = ResolveContext{deadline},
                   running = running_] {
        std::optional<Resolution> answer;
        try {
          answer.emplace((*resolver)(record, ctx));
        } catch (const std::exception& e) {
          answer.emplace(Resolution::unknown(fmt::format("the resolver threw: {}", e.what())));
        } catch (...) {
          answer.emplace(Resolution::unknown("the resolver threw a non-standard exception"));
        }
        {
          std::lock_guard lock(call->mutex);
          call->answer = std::move(answer);
        }
        call->answered.notify_all();
        running->fetch_sub(1);
      }).detach();
    } catch (...) {
      running_->fetch_sub(1);
      throw;
    }
    std::unique_lock lock(call->mutex);
    if (!call->answered.wait_until(lock, deadline, [&] { return call->answer.has_value(); })) {
      return Resolution::unknown(
          fmt::format("the resolver did not answer within {} ms", entry.params.time_limit.count()));
    }
    return std::move(*call->answer);
  }

  std::map<std::string, Entry, std::less<>> entries_;
  std::atomic<Duration::rep> every_claim_until_{0};
  std::size_t max_running_;
  std::shared_ptr<std::atomic<std::size_t>> running_ =
      std::make_shared<std::atomic<std::size_t>>(0);
};

namespace detail {

// The repair that carries out a resolution of the record read at `fence`. On the claim path
// (the claimer holds the record, `claiming`), not_happened needs none: the claimer runs the
// business. Elsewhere (the Janitor) it is a release, so that the next duplicate runs it.
inline std::optional<Repair> repair_for(const Resolution& r, std::uint64_t fence, bool claiming) {
  switch (r.kind()) {
    case Resolution::Kind::happened:
      return Repair{.action = RepairAction::complete,
                    .fence = fence,
                    .snapshot = r.snapshot(),
                    .retryable = false,
                    .reason = "resolver: the effect happened"};
    case Resolution::Kind::not_happened:
      if (claiming) return std::nullopt;
      return Repair{.action = RepairAction::release,
                    .fence = fence,
                    .snapshot = {},
                    .retryable = true,
                    .reason = "resolver: the effect did not happen"};
    case Resolution::Kind::unknown:
      break;
  }
  return Repair{.action = RepairAction::mark_unknown,
                .fence = fence,
                .snapshot = r.snapshot(),
                .retryable = false,
                .reason = "resolver: the outcome is unknown"};
}

}  // namespace detail
}  // namespace idem
