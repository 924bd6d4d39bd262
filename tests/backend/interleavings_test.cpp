// Every interleaving, up to a bound, of a few workers on one key and the clock, the janitor
// and the purge, on the pure core (idem/backend/record_rules.hpp) with a manual clock.
//
// A claim is modelled as an SQL store runs it: an atomic INSERT or read, then, for a
// takeover, a separate write guarded by takeover_holds() and the ticket read, so that
// anything may happen between the read and the write. complete and fail are atomic writes
// guarded by holds(). The explorer walks the state graph depth first, checks every
// transition once (states are memoised), and counts the interleavings (paths) it stands for.
//
// Asserted on every transition:
//  - never two workers acting as owners of one live record (two unfinished owners whose
//    leases are both live, or who both hold() the stored record);
//  - no stale complete or fail accepted: only the latest claimer's is, and only over its
//    own processing record;
//  - a finished record (succeeded, or failed for good) is never overwritten while it counts;
//  - every verdict is the one the decision table below (written out again, row by row) gives
//    for the record the claim read.
// Two deliberately broken cores (a takeover written without its guard; a processing record
// reclaimed whatever its lease) must each be caught, so that the checks are known to bite.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include <idem/backend/record_rules.hpp>

using namespace std::chrono_literals;

namespace {

using idem::Record;
using idem::Status;
using idem::TimePoint;
using idem::backend::Decision;

const idem::Options opts{.lease = 10ms, .ttl = 100ms};
const idem::Key key{"PAY", "one-key"};

// The decision table as docs/design.md states it, written independently of decide().
Decision table_says(const Record& r, std::string_view fp, TimePoint now) {
  if (r.expire_at <= now && r.status != Status::outcome_unknown) {
    return Decision::take_over_expired;
  }
  if (!r.fingerprint.empty() && !fp.empty() && r.fingerprint != fp) return Decision::conflict;
  if (r.status == Status::succeeded) return Decision::replay;
  if (r.status == Status::failed) return r.retryable ? Decision::take_over_retry : Decision::replay;
  if (r.status == Status::outcome_unknown) return Decision::outcome_unknown;
  return r.lease_until > now ? Decision::in_progress : Decision::take_over_stale;
}

struct Core {
  std::function<Decision(const Record&, std::string_view, TimePoint)> decide =
      [](const Record& r, std::string_view fp, TimePoint now) {
        return idem::backend::decide(r, fp, now);
      };
  std::function<bool(const Record&, Decision, TimePoint)> takeover_holds =
      [](const Record& r, Decision d, TimePoint now) {
        return idem::backend::takeover_holds(r, d, now);
      };
  bool check_ticket = true;  // the takeover's write is also guarded by the ticket read
};

enum class Phase : std::uint8_t {
  idle,      // next: claim (if it has claims left)
  writing,   // read a takeover; next: its guarded write
  owner,     // acquired; next: complete, fail (retryable or not) or crash
  finished,  // no more steps
};

struct Worker {
  Phase phase = Phase::idle;
  int claims_left = 1;  // deliveries of the request to this worker
  int claims_made = 0;
  std::string fingerprint;
  // writing: what the read saw
  std::optional<Record> read;
  Decision decided = Decision::in_progress;
  TimePoint read_at{};
  // owner: the claim held
  idem::Ticket ticket;
  TimePoint lease_until{};
};

struct State {
  std::optional<Record> record;
  TimePoint now{};
  std::vector<Worker> workers;
  int lease_jumps = 2;       // the clock passing a lease
  int ttl_jumps = 1;         // the clock passing the ttl
  int releases = 1;          // release_stale runs
  int purges = 1;            // purge_expired runs
  std::string last_claimer;  // owner token of the latest acquired claim (the ground truth)

  std::string encode() const {
    std::string s = fmt::format("{}|{}{}{}{}|{}|", now.time_since_epoch().count(), lease_jumps,
                                ttl_jumps, releases, purges, last_claimer);
    if (record) {
      const Record& r = *record;
      s += fmt::format(
          "R{},{},{},{},{},{},{},{},{},{},{}|", static_cast<int>(r.status), r.ticket.fence,
          r.ticket.owner, r.fingerprint, r.snapshot, r.retryable, r.attempts,
          r.created_at.time_since_epoch().count(), r.updated_at.time_since_epoch().count(),
          r.lease_until.time_since_epoch().count(), r.expire_at.time_since_epoch().count());
    }
    for (const Worker& w : workers) {
      s += fmt::format("W{},{},{},{},{},{},{}", static_cast<int>(w.phase), w.claims_left,
                       w.claims_made, static_cast<int>(w.decided),
                       w.read_at.time_since_epoch().count(), w.ticket.fence, w.ticket.owner);
      if (w.read) s += fmt::format("r{},{}", w.read->ticket.fence, w.read->ticket.owner);
      s += ';';
    }
    return s;
  }
};

struct Findings {
  std::uint64_t states = 0;
  std::uint64_t transitions = 0;
  double interleavings = 0;  // complete paths through the state graph
  std::vector<std::string> violations;

  static constexpr std::size_t enough = 5;
  void fail(std::string what) {
    if (violations.size() < enough) violations.push_back(std::move(what));
  }
};

class Explorer {
 public:
  Explorer(Core core, bool guard_at_write_time)
      : core_(std::move(core)), at_write_(guard_at_write_time) {}

  Findings run(State start) {
    paths_.clear();
    findings_ = {};
    findings_.interleavings = explore(start);
    return std::move(findings_);
  }

 private:
  static bool final_record(const Record& r) {
    return r.status == Status::succeeded || (r.status == Status::failed && !r.retryable);
  }

  // Checks what must hold after every step, given the state before it.
  void check(const State& before, const State& after, const std::string& step) {
    // A finished record that still counts is never overwritten.
    if (before.record && final_record(*before.record) &&
        !idem::backend::is_expired(*before.record, after.now)) {
      if (!after.record || !(*after.record == *before.record)) {
        findings_.fail(fmt::format("{}: overwrote a finished record (fence {})", step,
                                   before.record->ticket.fence));
      }
    }
    // Never two owners of one live record.
    int live = 0;
    int holding = 0;
    for (const Worker& w : after.workers) {
      if (w.phase != Phase::owner) continue;
      if (w.lease_until > after.now) ++live;
      if (after.record && idem::backend::holds(*after.record, w.ticket)) ++holding;
    }
    if (live > 1) findings_.fail(fmt::format("{}: two owners with live leases", step));
    if (holding > 1) findings_.fail(fmt::format("{}: two owners hold the record", step));
  }

  void answer(const Worker& w, const Record& seen, Decision d, TimePoint at,
              const std::string& step) {
    const Decision expected = table_says(seen, w.fingerprint, at);
    if (d != expected) {
      findings_.fail(fmt::format("{}: decided {} where the table says {}", step,
                                 idem::backend::to_string(d), idem::backend::to_string(expected)));
    }
  }

  void acquire(State& s, Worker& w, const Record& r) {
    w.phase = Phase::owner;
    w.ticket = r.ticket;
    w.lease_until = r.lease_until;
    w.read.reset();
    s.last_claimer = r.ticket.owner;
  }

  void end_delivery(Worker& w) {
    w.read.reset();
    w.ticket = {};
    w.lease_until = {};
    w.phase = w.claims_left > 0 ? Phase::idle : Phase::finished;
  }

  // The steps available in `s`, each applied to a copy.
  std::vector<std::pair<std::string, State>> successors(const State& s) {
    std::vector<std::pair<std::string, State>> out;
    for (std::size_t i = 0; i < s.workers.size(); ++i) {
      const Worker& w = s.workers[i];
      switch (w.phase) {
        case Phase::idle: {
          if (w.claims_left == 0) break;
          State n = s;
          Worker& nw = n.workers[i];
          --nw.claims_left;
          ++nw.claims_made;
          const std::string token = fmt::format("w{}c{}", i, nw.claims_made);
          const std::string step = fmt::format("worker {} claims ({})", i, token);
          if (!n.record) {
            n.record = idem::backend::claim_record(key, token, nw.fingerprint, n.now, opts);
            acquire(n, nw, *n.record);
          } else {
            const Decision d = core_.decide(*n.record, nw.fingerprint, n.now);
            answer(nw, *n.record, d, n.now, step);
            if (idem::backend::is_takeover(d)) {
              nw.phase = Phase::writing;
              nw.read = *n.record;
              nw.decided = d;
              nw.read_at = n.now;
            } else {
              end_delivery(nw);
            }
          }
          out.emplace_back(step, std::move(n));
          break;
        }
        case Phase::writing: {
          State n = s;
          Worker& nw = n.workers[i];
          const std::string token = fmt::format("w{}c{}", i, nw.claims_made);
          const std::string step = fmt::format("worker {} writes its takeover ({})", i, token);
          const TimePoint guard_now = at_write_ ? n.now : nw.read_at;
          const bool same_row =
              n.record && (!core_.check_ticket || n.record->ticket == nw.read->ticket);
          if (same_row && core_.takeover_holds(*n.record, nw.decided, guard_now)) {
            n.record = idem::backend::take_over(*n.record, nw.decided, nw.fingerprint, token,
                                                nw.read_at, opts);
            acquire(n, nw, *n.record);
          } else {
            // The row moved on: the store reads again, which this model takes as a new
            // delivery of the same worker if it has one left (bounding the rounds).
            end_delivery(nw);
          }
          out.emplace_back(step, std::move(n));
          break;
        }
        case Phase::owner: {
          struct End {
            const char* name;
            bool crash;
            Status to;
            bool retryable;
          };
          for (const End e : {End{"completes", false, Status::succeeded, false},
                              End{"fails retryably", false, Status::failed, true},
                              End{"fails for good", false, Status::failed, false},
                              End{"crashes", true, Status::processing, false}}) {
            State n = s;
            Worker& nw = n.workers[i];
            const std::string step = fmt::format("worker {} {}", i, e.name);
            if (!e.crash) {
              if (n.record && idem::backend::holds(*n.record, nw.ticket)) {
                if (nw.ticket.owner != n.last_claimer) {
                  findings_.fail(fmt::format("{}: a stale {} was accepted", step, e.name));
                }
                n.record = idem::backend::finished(*n.record, e.to, "{}", e.retryable, n.now);
              }
              // else LeaseLost: nothing written.
            }
            end_delivery(nw);
            out.emplace_back(step, std::move(n));
          }
          break;
        }
        case Phase::finished:
          break;
      }
    }
    if (s.lease_jumps > 0) {
      State n = s;
      --n.lease_jumps;
      n.now += opts.lease;
      out.emplace_back("the clock passes a lease", std::move(n));
    }
    if (s.ttl_jumps > 0) {
      State n = s;
      --n.ttl_jumps;
      n.now += opts.ttl;
      out.emplace_back("the clock passes the ttl", std::move(n));
    }
    if (s.releases > 0) {
      State n = s;
      --n.releases;
      if (n.record && idem::backend::is_stale(*n.record, n.now))
        n.record = idem::backend::released(*n.record, n.now);
      out.emplace_back("release_stale runs", std::move(n));
    }
    if (s.purges > 0) {
      State n = s;
      --n.purges;
      if (n.record && idem::backend::is_expired(*n.record, n.now)) n.record.reset();
      out.emplace_back("purge_expired runs", std::move(n));
    }
    return out;
  }

  double explore(const State& s) {
    const std::string id = s.encode();
    if (auto it = paths_.find(id); it != paths_.end()) return it->second;
    ++findings_.states;
    double paths = 0;
    auto next = successors(s);
    for (auto& [step, n] : next) {
      if (findings_.violations.size() >= Findings::enough) break;  // a broken core: shown
      ++findings_.transitions;
      check(s, n, step);
      paths += explore(n);
    }
    if (next.empty()) paths = 1;
    paths_.emplace(id, paths);
    return paths;
  }

  Core core_;
  bool at_write_;
  Findings findings_;
  std::unordered_map<std::string, double> paths_;
};

State start(std::vector<std::string> fingerprints, int deliveries) {
  State s;
  s.now = TimePoint{1'000'000ms};
  for (auto& fp : fingerprints) {
    Worker w;
    w.fingerprint = std::move(fp);
    w.claims_left = deliveries;
    s.workers.push_back(std::move(w));
  }
  return s;
}

void report(const char* what, const Findings& f) {
  WARN(fmt::format("{}: {:.0f} interleavings, {} states, {} transitions checked", what,
                   f.interleavings, f.states, f.transitions));
}

}  // namespace

TEST_CASE("interleavings: two and three workers on one key, every interleaving is safe") {
  for (const bool at_write : {true, false}) {
    const char* clock = at_write ? "guard at write time (MySQL)" : "guard at read time (SQLite)";
    SECTION(std::string("two workers, same request; ") + clock) {
      const Findings f = Explorer(Core{}, at_write).run(start({"fp", "fp"}, 2));
      report("2 workers, 2 deliveries each", f);
      CHECK(f.violations.empty());
      for (const auto& v : f.violations)
        UNSCOPED_INFO(v);
      CHECK(f.interleavings > 1e5);
    }
    SECTION(std::string("three workers, one with another request; ") + clock) {
      const Findings f = Explorer(Core{}, at_write).run(start({"fp", "fp", "other"}, 1));
      report("3 workers, 1 delivery each", f);
      for (const auto& v : f.violations)
        UNSCOPED_INFO(v);
      CHECK(f.violations.empty());
      CHECK(f.interleavings > 1e7);
    }
  }
}

TEST_CASE("interleavings: the checks catch the races other libraries shipped") {
  SECTION("a stale read followed by an unguarded write overwrites a completed result") {
    Core broken;
    broken.takeover_holds = [](const Record&, Decision, TimePoint) { return true; };
    broken.check_ticket = false;
    const Findings f = Explorer(broken, true).run(start({"fp", "fp"}, 2));
    REQUIRE_FALSE(f.violations.empty());
    CHECK_THAT(fmt::format("{}", fmt::join(f.violations, "\n")),
               Catch::Contains("overwrote a finished record") || Catch::Contains("two owners"));
  }
  SECTION("a live in-progress record reclaimed as an orphan runs the work twice") {
    Core broken;
    broken.decide = [](const Record& r, std::string_view fp, TimePoint now) {
      const Decision d = idem::backend::decide(r, fp, now);
      return d == Decision::in_progress ? Decision::take_over_retry : d;
    };
    broken.takeover_holds = [](const Record& r, Decision d, TimePoint now) {
      return r.status == Status::processing || idem::backend::takeover_holds(r, d, now);
    };
    const Findings f = Explorer(broken, true).run(start({"fp", "fp"}, 2));
    REQUIRE_FALSE(f.violations.empty());
    CHECK_THAT(
        fmt::format("{}", fmt::join(f.violations, "\n")),
        Catch::Contains("two owners with live leases") || Catch::Contains("where the table says"));
  }
}
