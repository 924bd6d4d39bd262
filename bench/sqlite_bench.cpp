// sqlite.cycle: run_once on idem::sqlite::Store against raw sqlite3 INSERT + UPDATE on the
// same file, same table shape, same journal and sync settings (WAL, synchronous=FULL).
// sqlite.async_cycle: the same store from one loop thread through async::OffloadStore (SQLite
// has no non-blocking API) against the blocking store on one thread, and the loop's timer.
#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include <idem/idem.hpp>
#include <idem/sqlite.hpp>

#include "common.hpp"
#include "scenarios.hpp"

#ifdef IDEM_BENCH_ASYNC
#include <boost/asio/thread_pool.hpp>
#include <idem/async/offload_store.hpp>

#include "async_run.hpp"
#endif

namespace bench {
namespace {

class RawSqlite {
 public:
  explicit RawSqlite(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      throw std::runtime_error("sqlite3_open_v2 " + path + ": " + sqlite3_errmsg(db_));
    }
    sqlite3_busy_timeout(db_, 5000);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");  // idem::sqlite's default
    exec(idem::sqlite::record_table_ddl(idem::sqlite::TableName{"", "raw_record"}));
    insert_ = prepare(
        "INSERT INTO raw_record (idempotent_key, biz_type, status, fence, owner_token, "
        "request_hash, response_snapshot, retryable, attempts, lease_until, created_at, "
        "updated_at, expire_at) VALUES (?1, 'BENCH', 0, 1, ?2, ?3, NULL, 0, 1, ?4, ?5, ?5, ?6)");
    update_ = prepare(
        "UPDATE raw_record SET status = 1, response_snapshot = ?1, updated_at = ?2 "
        "WHERE idempotent_key = ?3 AND biz_type = 'BENCH'");
  }
  ~RawSqlite() {
    sqlite3_finalize(insert_);
    sqlite3_finalize(update_);
    sqlite3_close_v2(db_);
  }
  RawSqlite(const RawSqlite&) = delete;
  RawSqlite& operator=(const RawSqlite&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string e = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error("sqlite3_exec: " + e);
    }
  }

  void cycle(const std::string& id, const idem::Options& o) {
    const std::int64_t now = millis(idem::system_now());
    const std::string token(32, '0');
    sqlite3_bind_text(insert_, 1, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
    sqlite3_bind_text(insert_, 2, token.data(), 32, SQLITE_STATIC);
    sqlite3_bind_text(insert_, 3, fixed_fingerprint().data(), 64, SQLITE_STATIC);
    sqlite3_bind_int64(insert_, 4, now + o.lease.count());
    sqlite3_bind_int64(insert_, 5, now);
    sqlite3_bind_int64(insert_, 6, now + o.ttl.count());
    step(insert_);
    const std::string snapshot = nlohmann::json{{"status", "paid"}}.dump();
    sqlite3_bind_blob(update_, 1, snapshot.data(), static_cast<int>(snapshot.size()),
                      SQLITE_STATIC);
    sqlite3_bind_int64(update_, 2, millis(idem::system_now()));
    sqlite3_bind_text(update_, 3, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
    step(update_);
    if (sqlite3_changes(db_) != 1) throw std::runtime_error("raw UPDATE missed");
  }

 private:
  static std::int64_t millis(idem::TimePoint t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  }
  sqlite3_stmt* prepare(const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK) {
      throw std::runtime_error(std::string("sqlite3_prepare_v2: ") + sqlite3_errmsg(db_));
    }
    return s;
  }
  void step(sqlite3_stmt* s) {
    const int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE)
      throw std::runtime_error(std::string("sqlite3_step: ") + sqlite3_errstr(rc));
  }

  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
  sqlite3_stmt* update_ = nullptr;
};

void sqlite_cycle(const Config& config) {
  const std::filesystem::path dir = std::filesystem::path(config.work_dir) / "idem-bench-sqlite";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "bench.db").string();
  const std::size_t ops = config.ops(1'000, 200);
  const idem::Options options{};
  {
    idem::sqlite::Store store{file};  // creates the library's table; both tables in one file
    RawSqlite raw{file};

    Side library{[&](int) {},
                 [&](int, int r) {
                   for (std::size_t i = 0; i < ops; ++i) {
                     auto out = idem::run_once(
                         store, idem::Key{"BENCH", key_id(r, 0, i)}, fixed_fingerprint(),
                         [] {
                           return nlohmann::json{{"status", "paid"}};
                         },
                         options);
                     if (out.verdict() != idem::Verdict::acquired)
                       throw std::runtime_error("not acquired");
                   }
                 }};
    Side baseline{[&](int) {},
                  [&](int, int r) {
                    for (std::size_t i = 0; i < ops; ++i)
                      raw.cycle(key_id(r, 0, i), options);
                  }};
    const auto t = alternate("sqlite.cycle", config.rounds_per_side(), 1, ops, library, baseline);
    auto j = throughput_json("sqlite.cycle", 1, ops, t, ">= 0.8");
    j["library"] = "run_once on idem::sqlite::Store (WAL, synchronous=FULL): claim, commit";
    j["baseline"] = "raw sqlite3 prepared INSERT + UPDATE of the same row, same file and pragmas";
    emit(j);
  }
  std::filesystem::remove_all(dir);
}

#ifdef IDEM_BENCH_ASYNC
void sqlite_async_cycle(const Config& config) {
  const std::string name = "sqlite.async_cycle";
  const std::filesystem::path dir = std::filesystem::path(config.work_dir) / "idem-bench-sqlite";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::size_t ops = config.ops(1'000, 200);
  const std::size_t in_flight = 8;
  {
    idem::sqlite::Store store{(dir / "bench.db").string()};
    idem::async::net::thread_pool calls{2};
    idem::async::OffloadStore offload{store, calls.get_executor()};
    idem::async::net::io_context io{1};
    LoopLateness lateness;
    LoopLateness idle_lateness;
    long async_runs = 0;
    long blocking_runs = 0;
    Side async_side{[&](int) {},
                    [&](int, int r) {
                      Feed feed{r, ops};
                      std::vector<idem::async::net::awaitable<void>> requesters;
                      for (std::size_t k = 0; k < in_flight; ++k)
                        requesters.push_back(cycle_requester(offload, feed, idem::Options{}));
                      run_all(io, std::move(requesters), &lateness);
                      async_runs += feed.runs;
                    }};
    Side blocking_side{[&](int) {},
                       [&](int, int r) {
                         IdleTicker ticker(idle_lateness);
                         for (std::size_t i = 0; i < ops; ++i) {
                           // (Thread 1's keys: the coroutines' are thread 0's.)
                           auto out = idem::run_once(store, idem::Key{"BENCH", key_id(r, 1, i)},
                                                     fixed_fingerprint(),
                                                     PaidBusiness{&blocking_runs}, idem::Options{});
                           if (!out) throw std::runtime_error("neither acquired nor replayed");
                         }
                       }};
    const auto t = alternate(name, config.rounds_per_side(), 1, 1, ops, async_side, blocking_side);
    auto j = throughput_json(name, 1, ops, t, "report");
    j["in_flight"] = in_flight;
    j["pool_threads"] = 2;
    j["library_executions"] = async_runs / config.rounds_per_side();
    j["baseline_executions"] = blocking_runs / config.rounds_per_side();
    j["loop_timer_late"] = lateness.json();
    j["idle_timer_late"] = idle_lateness.json();
    j["library"] =
        "idem::async::run_once on async::OffloadStore over idem::sqlite::Store from one loop "
        "thread, 8 requests in flight, each store call on a thread pool of 2";
    j["baseline"] = "sqlite.cycle's library side: idem::run_once on the store, one thread";
    calls.join();
    emit(j);
  }
  std::filesystem::remove_all(dir);
}
#endif

}  // namespace

int run_sqlite(const Config& config, const Selected& selected) {
  int failed = 0;
  if (selected("sqlite.cycle")) failed += attempt("sqlite.cycle", [&] { sqlite_cycle(config); });
  if (selected("sqlite.async_cycle")) {
#ifdef IDEM_BENCH_ASYNC
    failed += attempt("sqlite.async_cycle", [&] { sqlite_async_cycle(config); });
#else
    progress("sqlite.async_cycle: idem-bench was built without idem::async (Boost.Asio 1.81)");
    ++failed;
#endif
  }
  return failed;
}

}  // namespace bench
