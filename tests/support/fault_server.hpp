#pragma once
// Shared set-up of the fault suite: its own MariaDB server (killed and resumed by the tests,
// never the shared one), a business table that counts executions, and the invariants every
// scenario checks at the end.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <idem/idem.hpp>
#include <idem/mysql.hpp>

#include "mysql_server.hpp"
#include "paths.hpp"
#include "sqlite_file.hpp"

namespace idem_fault {

using namespace std::chrono_literals;

// The directory of the fault suite's own server (scripts/mariadb start/resume/stop DIR).
inline std::string server_dir() {
  return idem_test::paths::fault_mariadb_dir;
}

// The pid of the server running in server_dir(), or -1.
inline pid_t server_pid() {
  std::ifstream in(server_dir() + "/mysqld.pid");
  long pid = -1;
  if (!(in >> pid)) return -1;
  return static_cast<pid_t>(pid);
}

inline bool process_alive(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("State:", 0) == 0) return line.find('Z') == std::string::npos;
  }
  return false;  // no such process
}

// SIGKILLs the fault server (no shutdown, no flush: a crash) and waits until it is gone.
// Returns the pid it killed, or -1 if no server ran.
inline pid_t crash_server() {
  const pid_t pid = server_pid();
  if (pid <= 0 || !process_alive(pid)) return -1;
  ::kill(pid, SIGKILL);
  for (int i = 0; i < 500 && process_alive(pid); ++i)
    std::this_thread::sleep_for(10ms);
  return process_alive(pid) ? -1 : pid;
}

// Starts the fault server again on the same datadir; InnoDB recovers it. True on success.
inline bool resume_server() {
  const std::string cmd = std::string(idem_test::paths::source_dir) + "/scripts/mariadb resume " +
                          server_dir() + " >/dev/null 2>>" + server_dir() + "/resume.log";
  return std::system(cmd.c_str()) == 0;
}

using idem_test::scalar;

// Drops the pool's connections that were killed while idle: the stores retry on them, but the
// test's own raw queries (counts) do not. Takes every connection at once, so each is checked.
inline void drop_killed_connections(idem::mysql::Pool& pool) {
  std::vector<idem::mysql::Pool::Handle> all;
  for (std::size_t i = 0; i < pool.size(); ++i)
    all.push_back(pool.acquire());
  for (auto& c : all)
    c->ping();  // a failed ping marks the connection broken; the pool closes it on release
}

using idem_test::BusinessTable;

// How the calls of a scenario ended. Every call must end in a verdict or an idem::Error;
// anything else is counted as untyped (and fails the scenario).
struct Tally {
  std::atomic<long> calls{0}, executed{0}, acquired{0}, replayed{0}, in_progress{0}, conflict{0},
      typed_errors{0}, retryable_errors{0}, lease_lost{0}, untyped_errors{0};
  // No fault test registers a resolver, so none should see this verdict: left out of the
  // suites' sums on purpose, so that one would show there.
  std::atomic<long> outcome_unknown{0};
  std::mutex mutex;
  std::vector<std::string> acknowledged;  // keys whose call returned the business's value
  std::vector<std::string> failed;        // keys whose call ended in a typed error
  std::string first_untyped = "none";
  std::string first_typed = "none";

  template <class T>
  void verdict(const idem::Outcome<T>& out, const std::string& id) {
    switch (out.verdict()) {
      case idem::Verdict::acquired:
        ++acquired;
        break;
      case idem::Verdict::replayed:
        ++replayed;
        break;
      case idem::Verdict::in_progress:
        ++in_progress;
        break;
      case idem::Verdict::conflict:
        ++conflict;
        break;
      case idem::Verdict::outcome_unknown:
        ++outcome_unknown;
        break;
    }
    std::lock_guard lock(mutex);
    if (out.has_value()) acknowledged.push_back(id);
    if (out.verdict() == idem::Verdict::in_progress) failed.push_back(id);
  }
  void error(const idem::Error& e, const std::string& id) {
    ++typed_errors;
    if (dynamic_cast<const idem::LeaseLost*>(&e)) ++lease_lost;
    if (const auto* s = dynamic_cast<const idem::StoreError*>(&e); s && s->retryable())
      ++retryable_errors;
    std::lock_guard lock(mutex);
    failed.push_back(id);
    if (first_typed == "none") first_typed = e.what();
  }
  void untyped(const std::string& what) {
    ++untyped_errors;
    std::lock_guard lock(mutex);
    if (first_untyped == "none") first_untyped = what;
  }

  // Runs one call and files its ending; true when it ended in a verdict.
  template <class F>
  bool call(const std::string& id, F&& f) {
    ++calls;
    try {
      verdict(f(), id);
      return true;
    } catch (const idem::Error& e) {
      error(e, id);
    } catch (const std::exception& e) {
      untyped(e.what());
    } catch (...) {
      untyped("a non-std exception");
    }
    return false;
  }
};

// Records in the table that are processing although their lease ran out (by the server's
// clock). After a janitor round there must be none.
inline long long processing_past_lease(idem_test::Table& t) {
  return t.count("status = 0 AND lease_until <= UTC_TIMESTAMP(3)");
}

// True when every key in `ids` has a succeeded record.
inline long long missing_succeeded(idem_test::Table& t, const std::vector<std::string>& ids,
                                   const std::string& biz_type) {
  long long missing = 0;
  for (const auto& id : ids) {
    const auto r = t.store.find(idem::Key{biz_type, id});
    if (!r || r->status != idem::Status::succeeded) ++missing;
  }
  return missing;
}

// One line per scenario with the figures the report quotes (ctest -V shows them).
inline void figures(const std::string& scenario, const std::string& text) {
  std::cout << "[fault figures] " << scenario << ": " << text << std::endl;
}

}  // namespace idem_fault
