#pragma once
// Shared machinery of idem-bench: the run configuration, timing of parallel rounds, statistics
// and the one-line JSON report per scenario.
//
// Every scenario measures the library and a raw baseline in the same process, against the same
// server or file, in alternating rounds (the side that goes first alternates too), and reports
// the median of the rounds. Progress goes to stderr; only the JSON lines go to stdout.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace bench {

struct Config {
  bool quick = false;
  std::vector<std::string> only;  // empty: every scenario
  std::string socket;             // MySQL unix socket; empty: the mysql.* scenarios are skipped
  std::string database = "idem_test";
  std::string user = "root";
  std::string password;
  std::string work_dir = ".";               // where the SQLite files go
  std::vector<std::string> galera_sockets;  // unix sockets of a Galera cluster's nodes
  std::string redis_socket;  // Redis unix socket; empty: the redis.* scenarios cannot run
  std::string amqp;          // RabbitMQ HOST:PORT; empty: amqp.consume cannot run
  std::string pg_socket;     // PostgreSQL socket directory; empty: the pg.* scenarios cannot run
  int rounds = 0;            // per side; 0: 3 with --quick, 5 otherwise
  // Rows of mysql.big_table; 0: 100,000 with --quick, 1,000,000 otherwise.
  long big_rows = 0;
  // Rows per DELETE in mysql.big_table; 0: 1000 (the Janitor's default).
  std::size_t purge_batch = 0;
  // Pause between the DELETEs in mysql.big_table (a paced Janitor); 0: back to back.
  long purge_pause_ms = 0;
  // Connections of the 32-connection mysql scenarios; 0: 32.
  int threads = 0;
  // The library's MySQL claims read the new row back instead of INSERT ... RETURNING (the
  // path of servers without RETURNING), to measure what RETURNING saves.
  bool read_back = false;

  int rounds_per_side() const { return rounds > 0 ? rounds : (quick ? 3 : 5); }
  // The operation count of a round: `full` normally, `quick_n` with --quick.
  std::size_t ops(std::size_t full, std::size_t quick_n) const { return quick ? quick_n : full; }
};

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline void progress(const std::string& line) {
  std::fprintf(stderr, "idem-bench: %s\n", line.c_str());
  std::fflush(stderr);
}

// Runs body(t) on `threads` threads that start together; returns the wall time in seconds
// from the common start to the end of the last one (thread creation is not timed).
inline double run_parallel(int threads, const std::function<void(int)>& body) {
  std::latch ready(threads + 1);
  std::latch go(1);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.count_down();
      go.wait();
      try {
        body(t);
      } catch (...) {
        errors[static_cast<std::size_t>(t)] = std::current_exception();
      }
    });
  }
  ready.arrive_and_wait();
  const auto t0 = Clock::now();
  go.count_down();
  for (auto& th : pool)
    th.join();
  const double elapsed = seconds_since(t0);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return elapsed;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The q-quantile (0..1) by the nearest-rank method.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

inline double round_to(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

// The 1-minute load average (other processes on the machine skew every figure).
inline double load_average() {
  double l[3] = {0, 0, 0};
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3) l[0] = -1;
    std::fclose(f);
  }
  return l[0];
}

inline std::string fmt_load() {
  return fmt::format("load average {:.2f} on {} cores", load_average(),
                     std::thread::hardware_concurrency());
}

// Runs one scenario; an exception is reported on stderr and counted, and the next scenario
// runs anyway.
inline int attempt(const std::string& name, const std::function<void()>& scenario) {
  try {
    scenario();
    return 0;
  } catch (const std::exception& e) {
    progress(fmt::format("{}: error: {}", name, e.what()));
    return 1;
  }
}

// A throughput comparison: `rounds` rounds per side, alternating which side goes first.
// prepare(round) runs untimed before each timed run (e.g. empty the table); run(thread, round)
// does this thread's share of the round's operations.
struct Side {
  std::function<void(int round)> prepare;
  std::function<void(int thread, int round)> run;
};

struct Throughput {
  std::vector<double> library_rounds;   // operations per second, per round
  std::vector<double> baseline_rounds;  // operations per second, per round
  double load_before = 0;
  double load_after = 0;
};

// Each side on threads of its own count (mysql.async_cycle: one loop thread against 32).
inline Throughput alternate(const std::string& name, int rounds, int library_threads,
                            int baseline_threads, std::size_t operations, const Side& library,
                            const Side& baseline) {
  Throughput out;
  out.load_before = load_average();
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool lib = (r + k) % 2 == 1;  // round 0: baseline first; round 1: library first ...
      const Side& side = lib ? library : baseline;
      if (side.prepare) side.prepare(r);
      const double s =
          run_parallel(lib ? library_threads : baseline_threads, [&](int t) { side.run(t, r); });
      const double rate = static_cast<double>(operations) / s;
      (lib ? out.library_rounds : out.baseline_rounds).push_back(rate);
      progress(fmt::format("{} round {} {}: {:.0f} ops/s ({:.2f} s)", name, r + 1,
                           lib ? "library " : "baseline", rate, s));
    }
  }
  out.load_after = load_average();
  return out;
}

// Both sides on `threads` threads.
inline Throughput alternate(const std::string& name, int rounds, int threads,
                            std::size_t operations, const Side& library, const Side& baseline) {
  return alternate(name, rounds, threads, threads, operations, library, baseline);
}

// The common fields of a throughput line.
inline nlohmann::json throughput_json(const std::string& scenario, int threads,
                                      std::size_t operations, const Throughput& t,
                                      const std::string& goal) {
  const double lib = median(t.library_rounds);
  const double base = median(t.baseline_rounds);
  nlohmann::json j;
  j["scenario"] = scenario;
  j["threads"] = threads;
  j["operations"] = operations;  // per round and side
  j["rounds"] = t.library_rounds.size();
  j["library_ops_s"] = round_to(lib, 1);
  j["baseline_ops_s"] = round_to(base, 1);
  j["ratio"] = base > 0 ? round_to(lib / base, 3) : 0.0;
  j["goal"] = goal;
  j["library_rounds_ops_s"] = t.library_rounds;
  j["baseline_rounds_ops_s"] = t.baseline_rounds;
  for (auto& v : j["library_rounds_ops_s"])
    v = round_to(v.get<double>(), 1);
  for (auto& v : j["baseline_rounds_ops_s"])
    v = round_to(v.get<double>(), 1);
  j["load_avg"] = {round_to(t.load_before, 2), round_to(t.load_after, 2)};
  return j;
}

inline void emit(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// One slot per thread for a baseline's per-thread state (a connection, its statements),
// made by the thread on first use.
template <class T>
inline std::vector<std::unique_ptr<T>> per_thread(int threads) {
  return std::vector<std::unique_ptr<T>>(static_cast<std::size_t>(threads));
}

// A key id that no other round, thread or operation uses.
inline std::string key_id(int round, int thread, std::size_t i) {
  return fmt::format("r{}-t{}-{}", round, thread, i);
}

// The articles' retry storm at 12% duplicates: 3 operations in 25 repeat the key this thread
// used 20 operations earlier (finished by then); the others are fresh.
inline std::string mix_key_id(int round, int thread, std::size_t i) {
  const std::size_t m = i % 25;
  if (i >= 25 && (m == 7 || m == 15 || m == 23)) return key_id(round, thread, i - 20);
  return key_id(round, thread, i);
}

// A fixed request fingerprint (SHA-256 hex length), the same on both sides: the benchmark
// measures the store path, not the hashing of request bodies.
inline const std::string& fixed_fingerprint() {
  static const std::string fp(64, 'a');
  return fp;
}

// The no-op business of the cycle scenarios: counts its runs, answers a small JSON.
struct PaidBusiness {
  long* runs;
  nlohmann::json operator()() const {
    ++*runs;
    return nlohmann::json{{"status", "paid"}};
  }
};

}  // namespace bench
