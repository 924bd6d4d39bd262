// Issue 26's proof with a real external effect. The fake payment gateway (fake_gateway.cpp)
// runs as a process that commits every charge to its ledger before it answers, and holds each
// answer back for a moment (--delay-ms); the payment service (payment_service.cpp) takes
// 2,000 payments (12% duplicates) on 8 threads through idem::run_once, with a Janitor
// running. Each case SIGKILLs the service and starts it again at least 30 times, at random
// moments while charges wait at the gateway, then lets it finish, and counts the charges per
// trade in the gateway's ledger:
//
//   blind     (plain gateway, no key): some trade is charged twice - today's hazard, asserted
//             as such.
//   steps     (dedup gateway, step_key as Idempotency-Key, a local receipt step): every trade
//             charged exactly once, one receipt each.
//   resolver  (plain gateway, a resolver that looks the trade up, a share of its answers
//             forced to unknown): no trade charged twice, every record succeeded or
//             outcome_unknown; a Janitor round with an honest resolver then leaves none
//             outcome_unknown, and a last delivery charges exactly once every trade.
//   restore   (resolver mode): the store is backed up during the traffic and restored after
//             it, and the workload delivered again. With Resolvers::ask_every_claim_until set,
//             no trade is charged twice; without it, some are (the hazard, asserted as such).
//
// What the resolver needs: the lease (3 s) must outlast the time a dead worker's charge takes
// to land at the gateway, or "not happened" could be answered about a charge still in flight.
// What the restore needs: the window set by ask_every_claim_until(R + W) at the restore time R
// must last W, the longest time a request is delivered again after it was first sent (here a
// redelivery right after the restore, seconds; the case sets 10 minutes); a record the backup
// holds processing is asked about anyway (after_crash), the window is for the records it
// lacks. docs/recovery.md has the operator's runbook.
//
// A kill counts as "in the window" when, right after it, the ledger holds a charge the killed
// run made for a trade whose record is still processing: the charge happened and its record
// did not. Every case reports its figures in WARN lines.
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <idem/idem.hpp>
#include <idem/janitor.hpp>
#include <idem/mysql.hpp>
#include <idem/resolver.hpp>
#include <idem/sqlite.hpp>
#ifdef IDEM_RECOVERY_REDIS
#include <idem/redis.hpp>
#endif

#include "../support/mysql_server.hpp"
#include "../support/paths.hpp"
#include "../support/server_process.hpp"
#include "../support/sqlite_file.hpp"
#include "gateway_client.hpp"
#include "payments.hpp"
#include "service_process.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Counts = std::map<std::string, int>;
using idem_recovery::ChildProcess;

constexpr int payments = 2000;  // 12% of them duplicates
constexpr int kills = 30;
constexpr int threads = 8;
// How long the gateway holds a committed charge before it answers: most of a charge's time,
// so that most kills find charges waiting there (the window between charge and record).
constexpr int gateway_delay_ms = 40;
// A kill comes this long after the run began charging (uniformly drawn), so that 30 of them
// leave work for the final run.
constexpr int kill_after_min_ms = 20;
constexpr int kill_after_max_ms = 200;
// The forced unknowns of the resolver cases.
constexpr int unknown_share = 20;
// The restore cases' window: longer than the redelivery that follows the restore.
constexpr auto restore_window = 10min;

// ---- the stores, as the service and the test see them --------------------------------------

class SqliteBackend {
 public:
  using Store = idem::sqlite::Store;
  static constexpr bool has_receipts = true;
  static constexpr const char* name = "SQLite";

  explicit SqliteBackend(const idem_test::TempDir& dir)
      : file_((dir / "store.db").string()), store_(file_) {}

  std::vector<std::string> args() const { return {"--sqlite", file_}; }
  Store& store() { return store_; }

  Counts receipts() {
    Counts counts;
    auto c = store_.pool().acquire();
    auto rows = c->query("SELECT trade, COUNT(*) FROM receipts GROUP BY trade");
    while (rows.next())
      counts[rows.text(0)] = static_cast<int>(rows.integer(1));
    return counts;
  }

  // The backup API: a consistent copy while the service writes (it reads one snapshot).
  void backup(const std::string& to) { copy(file_, to); }
  // The same API in the other direction, into the live file (the service is stopped).
  void restore(const std::string& from) { copy(from, file_); }

 private:
  static void copy(const std::string& from, const std::string& to) {
    sqlite3* src = nullptr;
    sqlite3* dst = nullptr;
    const auto close = [&] {
      sqlite3_close(src);
      sqlite3_close(dst);
    };
    if (sqlite3_open_v2(from.c_str(), &src, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK ||
        sqlite3_open_v2(to.c_str(), &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
            SQLITE_OK) {
      close();
      throw std::runtime_error("cannot open " + from + " or " + to);
    }
    sqlite3_busy_timeout(src, 10'000);
    sqlite3_busy_timeout(dst, 10'000);
    sqlite3_backup* b = sqlite3_backup_init(dst, "main", src, "main");
    int rc = SQLITE_ERROR;
    if (b != nullptr) {
      while ((rc = sqlite3_backup_step(b, -1)) == SQLITE_BUSY || rc == SQLITE_LOCKED)
        std::this_thread::sleep_for(10ms);
      sqlite3_backup_finish(b);
    }
    const std::string error = sqlite3_errmsg(dst);
    close();
    if (rc != SQLITE_DONE) throw std::runtime_error("backup " + from + " -> " + to + ": " + error);
  }

  std::string file_;
  Store store_;
};

class MysqlBackend {
 public:
  using Store = idem::mysql::Store;
  static constexpr bool has_receipts = true;
  static constexpr const char* name = "MySQL";

  explicit MysqlBackend(const idem_test::TempDir&)
      : pool_(idem_test::make_pool(4)),
        table_(idem_test::unique_table("recovery")),
        store_(pool_, {.table = table_}) {
    store_.ensure_schema();
  }
  ~MysqlBackend() {
    try {
      auto c = pool_->acquire();
      c->query("DROP TABLE IF EXISTS `" + table_ + "`, `" + table_ + "_receipts`");
    } catch (...) {
    }
  }
  MysqlBackend(const MysqlBackend&) = delete;
  MysqlBackend& operator=(const MysqlBackend&) = delete;

  std::vector<std::string> args() const {
    const auto server = idem_test::server();
    return {"--mysql-socket", server.unix_socket, "--mysql-database",
            server.database,  "--mysql-table",    table_};
  }
  Store& store() { return store_; }

  Counts receipts() {
    Counts counts;
    auto c = pool_->acquire();
    for (const auto& row :
         c->select("SELECT trade, COUNT(*) FROM `" + table_ + "_receipts` GROUP BY trade", {})) {
      counts[*row.at(0).to_text()] = static_cast<int>(*row.at(1).integer());
    }
    return counts;
  }

  // What an operator runs: mysqldump --single-transaction (one consistent snapshot of the
  // record table, taken while the service writes), restored with the mysql client.
  void backup(const std::string& to) {
    shell(fmt::format("mysqldump {} --single-transaction {} {} > '{}'", client_args(),
                      idem_test::server().database, table_, to));
  }
  void restore(const std::string& from) {
    shell(fmt::format("mysql {} {} < '{}'", client_args(), idem_test::server().database, from));
  }

 private:
  static std::string client_args() {
    return fmt::format("--socket='{}' --user=root", idem_test::server().unix_socket);
  }
  static void shell(const std::string& command) {
    if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  }

  std::shared_ptr<idem::mysql::Pool> pool_;
  std::string table_;
  Store store_;
};

#ifdef IDEM_RECOVERY_REDIS
// For the resolver case (the one issue 26 asks for on Redis): no local receipts here.
class RedisBackend {
 public:
  using Store = idem::redis::Store;
  static constexpr const char* name = "Redis";

  explicit RedisBackend(const idem_test::TempDir&)
      : prefix_(fmt::format("recovery-{}-{}", ::getpid(), counter()++)),
        pool_(std::make_shared<idem::redis::Pool>(params(), idem::redis::PoolParams{.size = 4})),
        store_(pool_, {.prefix = prefix_}) {}

  std::vector<std::string> args() const {
    return {"--redis-socket", params().unix_socket, "--redis-prefix", prefix_};
  }
  Store& store() { return store_; }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  static idem::redis::ConnectionParams params() {
    const char* socket = std::getenv("IDEM_REDIS_SOCKET");
    if (socket == nullptr || *socket == '\0') {
      throw std::runtime_error(
          "IDEM_REDIS_SOCKET is not set: the Redis cases run against the redis-server of the "
          "CTest fixture 'redis.start' (run them through ctest)");
    }
    idem::redis::ConnectionParams p;
    p.unix_socket = socket;
    return p;
  }

  std::string prefix_;
  std::shared_ptr<idem::redis::Pool> pool_;
  Store store_;
};
#endif

// Every record of the store, by trade.
template <class S>
std::map<std::string, idem::Record> records_of(S& store) {
  std::map<std::string, idem::Record> by_trade;
  for (idem::Record& r : store.list({.limit = idem::max_list_limit}))
    by_trade.emplace(r.key.id(), std::move(r));
  return by_trade;
}

template <class S>
std::map<idem::Status, int> status_counts(S& store) {
  std::map<idem::Status, int> counts;
  for (const auto& [trade, r] : records_of(store))
    ++counts[r.status];
  return counts;
}

// A Janitor round with an honest resolver (none forced unknown) that asks about every
// outcome_unknown record at once: an operator's repair pass.
template <class S>
idem::JanitorStats repair_round(S& store, int gateway_port) {
  idem::Resolvers resolvers;
  resolvers.add(std::string(idem_recovery::biz_type),
                idem_recovery::gateway_resolver(gateway_port, 0), {.time_limit = 5s});
  idem::Janitor<S> janitor{
      store,
      {.interval = 1h, .resolvers = &resolvers, .resolve_batch = 5000, .unknown_retry = 0ms}};
  // The Janitor's thread runs its first round at once.
  const auto deadline = Clock::now() + 120s;
  while (janitor.stats().rounds == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  return janitor.stats();
}

// ---- the ledger ------------------------------------------------------------------------------

struct Judged {
  int charged_twice = 0;  // trades with two charges or more
  int lost = 0;           // trades of the workload with none
  int total = 0;          // charges
};

Judged judge(const Counts& ledger, const std::set<std::string>& trades) {
  Judged j;
  for (const auto& [trade, n] : ledger) {
    j.total += n;
    if (n > 1) ++j.charged_twice;
  }
  for (const std::string& t : trades) {
    if (ledger.count(t) == 0) ++j.lost;
  }
  return j;
}

// Trades with more charges in `after` than in `before`.
int charged_again(const Counts& before, const Counts& after) {
  int n = 0;
  for (const auto& [trade, count] : after) {
    const auto was = before.find(trade);
    if (count > (was == before.end() ? 0 : was->second)) ++n;
  }
  return n;
}

// ---- the driver ------------------------------------------------------------------------------

// What the service's runs printed.
struct Printed {
  int charging = 0;
  int charged = 0;
  int replayed = 0;  // charges the gateway answered with the one the key already had
  std::map<std::string, int> resolved;  // answer -> count
  std::string done;                     // the final "done ..." line
};

// What the kills did.
struct Traffic {
  int kills = 0;
  int kills_in_window = 0;       // kills after which a charge of the run had no record
  int charged_not_recorded = 0;  // such charges, over all kills
  int without_point = 0;         // of those, with no recovery point for "charge" either
  int in_flight = 0;             // "charging" lines without "charged" at the kills
  std::chrono::milliseconds time{};
};

class Driver {
 public:
  Driver(std::vector<std::string> args, std::string ledger, unsigned seed)
      : args_(std::move(args)), ledger_(std::move(ledger)), rng_(seed) {}

  Printed& printed() { return printed_; }
  // The service's --mode.
  std::string mode() const {
    for (std::size_t i = 0; i + 1 < args_.size(); ++i) {
      if (args_[i] == "--mode") return args_[i + 1];
    }
    return "?";
  }

  // Starts the service `n` times and SIGKILLs each run at a random moment after it began
  // charging; `before_kill(k)` runs while run k still works, right before its kill.
  template <class S>
  Traffic crash(S& store, int n, const std::function<void(int)>& before_kill = {}) {
    Traffic t;
    const auto start = Clock::now();
    std::uniform_int_distribution<int> after(kill_after_min_ms, kill_after_max_ms);
    for (int k = 0; k < n; ++k) {
      const Counts before = idem_test::charges_per_trade(ledger_);
      ChildProcess service(idem_test::paths::payment_service, args_);
      int in_flight = 0;
      const auto read = [&](Clock::time_point until, bool stop_at_charging) {
        while (const auto line = service.next_line(until)) {
          if (!note(*line, in_flight) && stop_at_charging) return true;
        }
        return false;
      };
      if (!read(Clock::now() + 60s, true)) {
        FAIL_CHECK("run " << k << " never began charging: the workload ran out before kill " << k
                          << " (eof " << service.eof() << ")");
        break;
      }
      read(Clock::now() + std::chrono::milliseconds{after(rng_)}, false);
      if (before_kill) before_kill(k);
      service.kill();
      ++t.kills;
      t.in_flight += in_flight;
      // A charge sent just before the kill reaches the ledger a moment later.
      std::this_thread::sleep_for(20ms);
      const Counts now = idem_test::charges_per_trade(ledger_);
      int unrecorded = 0;
      for (const auto& r :
           store.list({.status = idem::Status::processing, .limit = idem::max_list_limit})) {
        const auto was = before.find(r.key.id());
        const auto is = now.find(r.key.id());
        const bool charged_now =
            is != now.end() && (was == before.end() || is->second > was->second);
        if (!charged_now) continue;
        ++unrecorded;
        if (r.recovery_points.find("\"charge\"") == std::string::npos) ++t.without_point;
      }
      t.charged_not_recorded += unrecorded;
      if (unrecorded > 0) ++t.kills_in_window;
    }
    t.time = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    return t;
  }

  // One run to its end (every line answered); `extra` arguments for this run only. Returns
  // its exit status (-1: it did not exit by itself within the deadline).
  int finish(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = args_;
    args.insert(args.end(), extra.begin(), extra.end());
    ChildProcess service(idem_test::paths::payment_service, args);
    const auto deadline = Clock::now() + 300s;
    int in_flight = 0;
    while (const auto line = service.next_line(deadline))
      note(*line, in_flight);
    if (!service.eof()) return -1;
    return service.wait(deadline + 10s).value_or(-1);
  }

 private:
  // Counts a line; false for a "charging" line.
  bool note(const std::string& line, int& in_flight) {
    if (line.rfind("charging ", 0) == 0) {
      ++printed_.charging;
      ++in_flight;
      return false;
    }
    if (line.rfind("charged ", 0) == 0) {
      ++printed_.charged;
      if (line.ends_with(" replayed")) ++printed_.replayed;
      --in_flight;
    } else if (line.rfind("resolved ", 0) == 0) {
      ++printed_.resolved[line.substr(line.rfind(' ') + 1)];
    } else if (line.rfind("done ", 0) == 0) {
      printed_.done = line;
    }
    return true;
  }

  std::vector<std::string> args_;
  std::string ledger_;
  std::mt19937 rng_;
  Printed printed_;
};

// One case's world: a temporary directory, the workload file, the store and the gateway.
template <class Backend>
struct World {
  idem_test::TempDir dir;
  Backend backend{dir};
  std::string ledger = (dir / "ledger.db").string();
  std::string workload = (dir / "workload.txt").string();
  std::set<std::string> trades;
  unsigned seed = std::random_device{}();
  std::vector<idem_recovery::Payment> lines = idem_recovery::make_workload(payments, seed);
  std::optional<idem_test::ServerProcess> gateway;

  explicit World(const std::string& gateway_mode) {
    idem_recovery::write_workload(workload, lines);
    for (const auto& p : lines)
      trades.insert(idem_recovery::trade_id(p.trade));
    gateway.emplace(idem_test::paths::fake_gateway,
                    std::vector<std::string>{"--ledger", ledger, "--mode", gateway_mode,
                                             "--delay-ms", std::to_string(gateway_delay_ms)});
  }

  std::vector<std::string> service_args(const std::string& mode,
                                        const std::vector<std::string>& more = {}) const {
    std::vector<std::string> args = backend.args();
    const std::vector<std::string> common{"--gateway-port", std::to_string(gateway->port()),
                                          "--mode",         mode,
                                          "--workload",     workload,
                                          "--threads",      std::to_string(threads),
                                          "--lease-ms",     "3000",
                                          "--janitor-ms",   "500"};
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  Counts ledger_counts() const { return idem_test::charges_per_trade(ledger); }
};

std::string seconds(std::chrono::milliseconds ms) {
  return fmt::format("{:.1f} s", static_cast<double>(ms.count()) / 1000.0);
}

std::string traffic_line(const char* store, const char* mode, const Traffic& t, unsigned seed) {
  return fmt::format(
      "{} {}: {} kills in {} (seed {}); {} kills in the window between a charge and its "
      "record, {} such charges ({} with no recovery point), {} charges in flight at the kills",
      store, mode, t.kills, seconds(t.time), seed, t.kills_in_window, t.charged_not_recorded,
      t.without_point, t.in_flight);
}

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

// ---- the cases -------------------------------------------------------------------------------

template <class Backend>
void blind_case() {
  const auto start = Clock::now();
  World<Backend> w("plain");
  Driver driver(w.service_args("blind"), w.ledger, w.seed);
  const Traffic t = driver.crash(w.backend.store(), kills);
  REQUIRE(driver.finish() == 0);
  WARN(fmt::format("{} {}: the final run printed: {}", Backend::name, driver.mode(),
                   driver.printed().done));
  const Judged j = judge(w.ledger_counts(), w.trades);
  WARN(traffic_line(Backend::name, "blind", t, w.seed));
  WARN(fmt::format(
      "{} blind: {} trades, {} charges, {} trades charged twice or more, {} lost; "
      "{} in all",
      Backend::name, w.trades.size(), j.total, j.charged_twice, j.lost, seconds(since(start))));
  CHECK(t.kills >= kills);
  CHECK(t.kills_in_window > 0);
  // The hazard idem's blind mode has today: a crash between the charge and its record, and
  // the next delivery charges again.
  CHECK(j.charged_twice > 0);
  CHECK(j.lost == 0);
}

template <class Backend>
void steps_case() {
  const auto start = Clock::now();
  World<Backend> w("dedup");
  Driver driver(w.service_args("steps"), w.ledger, w.seed);
  const Traffic t = driver.crash(w.backend.store(), kills);
  REQUIRE(driver.finish() == 0);
  WARN(fmt::format("{} {}: the final run printed: {}", Backend::name, driver.mode(),
                   driver.printed().done));
  const Counts ledger = w.ledger_counts();
  const Judged j = judge(ledger, w.trades);
  const auto statuses = status_counts(w.backend.store());
  WARN(traffic_line(Backend::name, "steps", t, w.seed));
  WARN(fmt::format(
      "{} steps: {} trades, {} charges, {} trades charged twice or more, {} lost; {} charges "
      "sent again after a crash answered as replays by the gateway; {} in all",
      Backend::name, w.trades.size(), j.total, j.charged_twice, j.lost, driver.printed().replayed,
      seconds(since(start))));
  CHECK(t.kills >= kills);
  CHECK(t.kills_in_window > 0);
  CHECK(driver.printed().replayed > 0);  // the step key was needed: a crash left a charge
  CHECK(j.charged_twice == 0);
  CHECK(j.lost == 0);
  CHECK(ledger.size() == w.trades.size());
  CHECK(statuses ==
        std::map<idem::Status, int>{{idem::Status::succeeded, static_cast<int>(w.trades.size())}});
  if constexpr (Backend::has_receipts) {
    // The local step: one receipt per trade, written with its recovery point.
    const Counts receipts = w.backend.receipts();
    int not_one = 0;
    for (const std::string& trade : w.trades) {
      const auto it = receipts.find(trade);
      if (it == receipts.end() || it->second != 1) ++not_one;
    }
    CHECK(receipts.size() == w.trades.size());
    CHECK(not_one == 0);
  }
}

// Every trade charged exactly once, every record succeeded.
template <class Backend>
void check_exactly_once(World<Backend>& w, const char* when) {
  INFO(when);
  const Counts ledger = w.ledger_counts();
  const Judged j = judge(ledger, w.trades);
  CHECK(j.charged_twice == 0);
  CHECK(j.lost == 0);
  CHECK(ledger.size() == w.trades.size());
  CHECK(status_counts(w.backend.store()) ==
        std::map<idem::Status, int>{{idem::Status::succeeded, static_cast<int>(w.trades.size())}});
}

template <class Backend>
void resolver_case() {
  const auto start = Clock::now();
  World<Backend> w("plain");
  Driver driver(w.service_args("resolver", {"--unknown-share", std::to_string(unknown_share)}),
                w.ledger, w.seed);
  const Traffic t = driver.crash(w.backend.store(), kills);
  REQUIRE(driver.finish() == 0);
  WARN(fmt::format("{} {}: the final run printed: {}", Backend::name, driver.mode(),
                   driver.printed().done));

  auto& store = w.backend.store();
  const Counts ledger = w.ledger_counts();
  const Judged j = judge(ledger, w.trades);
  const auto records = records_of(store);
  int unknown = 0, succeeded = 0, other = 0, unknown_charged = 0, succeeded_not_once = 0;
  for (const auto& [trade, r] : records) {
    const auto it = ledger.find(trade);
    const int charges = it == ledger.end() ? 0 : it->second;
    if (r.status == idem::Status::outcome_unknown) {
      ++unknown;
      unknown_charged += charges;
    } else if (r.status == idem::Status::succeeded) {
      ++succeeded;
      if (charges != 1) ++succeeded_not_once;
    } else {
      ++other;
    }
  }
  WARN(traffic_line(Backend::name, "resolver", t, w.seed));
  WARN(fmt::format(
      "{} resolver: {} trades, {} charges, {} trades charged twice or more; resolver answers "
      "happened {}, not_happened {}, unknown {}; records succeeded {}, outcome_unknown {} ({} of "
      "them charged), other {}",
      Backend::name, w.trades.size(), j.total, j.charged_twice,
      driver.printed().resolved["happened"], driver.printed().resolved["not_happened"],
      driver.printed().resolved["unknown"], succeeded, unknown, unknown_charged, other));
  CHECK(t.kills >= kills);
  CHECK(t.kills_in_window > 0);
  CHECK(driver.printed().resolved["happened"] > 0);  // a crash left a charge, the resolver saw it
  CHECK(j.charged_twice == 0);
  CHECK(records.size() == w.trades.size());
  CHECK(other == 0);  // every record succeeded or outcome_unknown
  CHECK(succeeded_not_once == 0);
  CHECK(unknown > 0);  // the forced share really ended outcome_unknown
  CHECK(succeeded + unknown == static_cast<int>(w.trades.size()));

  // The repair: a Janitor round with an honest resolver settles every outcome_unknown record
  // (happened: succeeded; not_happened: released), then the workload is delivered once more.
  const idem::JanitorStats repaired = repair_round(store, w.gateway->port());
  const int unknown_after = status_counts(store)[idem::Status::outcome_unknown];
  REQUIRE(driver.finish() == 0);
  WARN(fmt::format(
      "{} resolver: repair round: happened {}, not_happened {}, unknown {}, errors {}; "
      "outcome_unknown {} before the repair, {} after; {} in all",
      Backend::name, repaired.resolved_happened, repaired.resolved_not_happened,
      repaired.resolved_unknown, repaired.errors, unknown, unknown_after, seconds(since(start))));
  CHECK(repaired.errors == 0);
  CHECK(repaired.resolved_unknown == 0);
  CHECK(unknown_after == 0);
  check_exactly_once(w, "after the repair and a last delivery");
}

// Charges whose answer never comes (the service gives up before the gateway answers, after it
// charged): each business throws EffectUnknown, its record waits outcome_unknown instead of
// charging again, and a resolver round settles every one as charged once.
template <class Backend>
void timeout_case() {
  const auto start = Clock::now();
  World<Backend> w("plain");
  Driver driver(
      w.service_args("resolver", {"--gateway-timeout-ms", std::to_string(gateway_delay_ms / 4)}),
      w.ledger, w.seed);
  REQUIRE(driver.finish() == 0);
  auto& store = w.backend.store();
  const Judged j = judge(w.ledger_counts(), w.trades);
  auto statuses = status_counts(store);
  WARN(
      fmt::format("{} timeouts: {} trades, {} charges, {} trades charged twice or more; records "
                  "outcome_unknown {}, succeeded {}",
                  Backend::name, w.trades.size(), j.total, j.charged_twice,
                  statuses[idem::Status::outcome_unknown], statuses[idem::Status::succeeded]));
  CHECK(j.charged_twice == 0);
  CHECK(statuses[idem::Status::outcome_unknown] > 0);  // left to the resolver, not retried
  CHECK(statuses[idem::Status::failed] == 0);
  CHECK(statuses[idem::Status::processing] == 0);

  const idem::JanitorStats repaired = repair_round(store, w.gateway->port());
  WARN(fmt::format("{} timeouts: repair round: happened {}, not_happened {}, unknown {}; {} in all",
                   Backend::name, repaired.resolved_happened, repaired.resolved_not_happened,
                   repaired.resolved_unknown, seconds(since(start))));
  CHECK(repaired.errors == 0);
  CHECK(repaired.resolved_happened > 0);
  CHECK(status_counts(store)[idem::Status::outcome_unknown] == 0);
  // A charge that never reached the gateway was released: the last delivery, answered in
  // time, runs it; the others replay.
  REQUIRE(driver.finish({"--gateway-timeout-ms", "30000"}) == 0);
  check_exactly_once(w, "after the timed-out charges were resolved and a last delivery");
}

template <class Backend>
void restore_case() {
  const auto start = Clock::now();
  World<Backend> w("plain");
  Driver driver(w.service_args("resolver"), w.ledger, w.seed);
  const std::string backup = (w.dir / "backup").string();
  // The backup is taken while the service charges, half-way through the kills.
  const Traffic t = driver.crash(w.backend.store(), kills, [&](int k) {
    if (k == kills / 2) w.backend.backup(backup);
  });
  REQUIRE(driver.finish() == 0);
  check_exactly_once(w, "after the traffic");

  // The restore, with the window: every claim asks the resolver first, fresh or not.
  w.backend.restore(backup);
  const auto restored = records_of(w.backend.store());
  std::vector<idem_recovery::Payment> gone;  // one line per trade the backup has no record of
  std::set<std::string> seen;
  int unfinished = 0;  // records the backup holds processing (a resolver asks about those anyway)
  for (const auto& p : w.lines) {
    const std::string trade = idem_recovery::trade_id(p.trade);
    const auto r = restored.find(trade);
    if (r == restored.end() && seen.insert(trade).second) gone.push_back(p);
    if (r != restored.end() && r->second.status == idem::Status::processing &&
        seen.insert(trade).second) {
      ++unfinished;
    }
  }
  const Counts traffic = w.ledger_counts();
  const auto window = std::chrono::duration_cast<std::chrono::milliseconds>(restore_window);
  REQUIRE(driver.finish({"--ask-every-claim-ms", std::to_string(window.count())}) == 0);
  const Counts with_window = w.ledger_counts();
  check_exactly_once(w, "after the restore with the window, and a redelivery");

  // The same restore without it, and the payments the backup has no record of delivered
  // again (a sample, to keep the run short): each claims afresh and charges a second time.
  w.backend.restore(backup);
  gone.resize(std::min<std::size_t>(gone.size(), 100));
  const std::string sample = (w.dir / "gone.txt").string();
  idem_recovery::write_workload(sample, gone);
  REQUIRE(driver.finish({"--workload", sample}) == 0);
  const Counts without = w.ledger_counts();
  const int again_with = charged_again(traffic, with_window);
  const int again_without = charged_again(with_window, without);
  WARN(traffic_line(Backend::name, "restore", t, w.seed));
  WARN(fmt::format(
      "{} restore: {} trades; the backup taken at kill {} has no record of {} and holds {} "
      "processing; after the restore and a redelivery of every line with "
      "ask_every_claim_until, {} trades charged again; without it, {} of {} redelivered "
      "trades charged again; {} in all",
      Backend::name, w.trades.size(), kills / 2, w.trades.size() - restored.size(), unfinished,
      again_with, again_without, gone.size(), seconds(since(start))));
  CHECK(t.kills >= kills);
  CHECK_FALSE(gone.empty());
  CHECK(again_with == 0);
  // The hazard the window closes, shown as such.
  CHECK(again_without > 0);
}

}  // namespace

TEST_CASE("SQLite, blind: a crash between the charge and its record charges a trade twice",
          "[sqlite][blind]") {
  blind_case<SqliteBackend>();
}

TEST_CASE("SQLite, steps: the step key on a deduplicating gateway charges every trade once",
          "[sqlite][steps]") {
  steps_case<SqliteBackend>();
}

TEST_CASE("SQLite, resolver: no trade charged twice, unknowns repaired to none",
          "[sqlite][resolver]") {
  resolver_case<SqliteBackend>();
}

TEST_CASE("SQLite, timeouts: a charge left without an answer is resolved, never sent again",
          "[sqlite][resolver]") {
  timeout_case<SqliteBackend>();
}

TEST_CASE("SQLite, restore: ask_every_claim_until keeps a restored store from charging twice",
          "[sqlite][restore]") {
  restore_case<SqliteBackend>();
}

TEST_CASE("MySQL, blind: a crash between the charge and its record charges a trade twice",
          "[mysql][blind]") {
  blind_case<MysqlBackend>();
}

TEST_CASE("MySQL, steps: the step key on a deduplicating gateway charges every trade once",
          "[mysql][steps]") {
  steps_case<MysqlBackend>();
}

TEST_CASE("MySQL, resolver: no trade charged twice, unknowns repaired to none",
          "[mysql][resolver]") {
  resolver_case<MysqlBackend>();
}

TEST_CASE("MySQL, timeouts: a charge left without an answer is resolved, never sent again",
          "[mysql][resolver]") {
  timeout_case<MysqlBackend>();
}

TEST_CASE("MySQL, restore: ask_every_claim_until keeps a restored store from charging twice",
          "[mysql][restore]") {
  restore_case<MysqlBackend>();
}

#ifdef IDEM_RECOVERY_REDIS
TEST_CASE("Redis, resolver: no trade charged twice, unknowns repaired to none",
          "[redis][resolver]") {
  resolver_case<RedisBackend>();
}
#endif
