// sqlite.cycle: run_once on idem::sqlite::Store against raw sqlite3 INSERT + UPDATE on the
// same file, same table shape, same journal and sync settings (WAL, synchronous=FULL).
#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include <idem/idem.hpp>
#include <idem/sqlite.hpp>

#include "common.hpp"
#include "scenarios.hpp"

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

}  // namespace

int run_sqlite(const Config& config, const Selected& selected) {
  if (!selected("sqlite.cycle")) return 0;
  return attempt("sqlite.cycle", [&] { sqlite_cycle(config); });
}

}  // namespace bench
