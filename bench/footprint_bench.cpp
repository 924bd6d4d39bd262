// redis.footprint, mysql.footprint: what one finished record takes, in the server's memory
// (Redis: INFO's used_memory before and after) or in the table's pages (MySQL: InnoDB's data
// and index length after ANALYZE TABLE), for responses of 16, 64, 256 and 1,024 bytes. Next to
// it, the same responses kept the way a hand-written dedup keeps them: on Redis a string key
// holding the response with its TTL; on MySQL a table of the key, the biz_type, the response
// and the expiry (the index a purge needs). Lower is better: ratio = library / baseline.
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <idem/idem.hpp>
#include <idem/mysql.hpp>
#include <idem/redis.hpp>

#include "common.hpp"
#include "mysql/shared.hpp"
#include "scenarios.hpp"

namespace bench {
namespace {

constexpr std::size_t response_sizes[] = {16, 64, 256, 1024};
constexpr int writers = 8;

// The response of `bytes` bytes a business returns: {"r":"xx...x"}.
nlohmann::json response_of(std::size_t bytes) {
  return nlohmann::json{{"r", std::string(bytes - 8, 'x')}};
}

// Ids shaped like the UUIDs services use, in a random order, so that hashes and B-trees fill
// as they do in production (sequential ids would pack InnoDB's pages tighter).
std::vector<std::string> random_ids(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> ids;
  ids.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t a = rng();
    const std::uint64_t b = rng();
    ids.push_back(fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xffff,
                              a & 0xffff, b >> 48, b & 0xffffffffffffULL));
  }
  return ids;
}

// Runs write(id) for every id, spread over `writers` threads.
void write_all(const std::vector<std::string>& ids,
               const std::function<void(int, const std::string&)>& write) {
  run_parallel(writers, [&](int t) {
    for (std::size_t i = static_cast<std::size_t>(t); i < ids.size(); i += writers)
      write(t, ids[i]);
  });
}

nlohmann::json footprint_json(const std::string& scenario, std::size_t response,
                              std::size_t records, double library, double baseline,
                              const std::string& measure) {
  nlohmann::json j;
  j["scenario"] = scenario;
  j["response_bytes"] = response;
  j["records"] = records;
  j["library_bytes_per_record"] = round_to(library, 1);
  j["baseline_bytes_per_record"] = round_to(baseline, 1);
  j["ratio"] = baseline > 0 ? round_to(library / baseline, 3) : 0.0;
  j["measure"] = measure;
  return j;
}

// ---- Redis ----

std::int64_t used_memory(idem::redis::Connection& c) {
  const std::string info(c.command({"INFO", "memory"}).text());
  const auto at = info.find("used_memory:");
  if (at == std::string::npos) throw std::runtime_error("INFO memory has no used_memory");
  return std::stoll(info.substr(at + 12));
}

void redis_footprint(const Config& config) {
  const std::size_t n = config.ops(50'000, 10'000);
  idem::redis::ConnectionParams params;
  params.unix_socket = config.redis_socket;
  idem::redis::Connection admin(params);
  const auto ids = random_ids(n, 7);
  for (const std::size_t bytes : response_sizes) {
    const nlohmann::json response = response_of(bytes);
    const std::string text = response.dump();
    const std::string ttl = std::to_string(idem::Options{}.ttl.count());

    // idem's records, packed (a stamped prefix) or as layout 1's hashes. The stamps are written
    // before the count starts: one small key per bucket, not a cost per record.
    const auto idem_bytes = [&](bool packed) {
      admin.command({"FLUSHALL"});
      auto pool = std::make_shared<idem::redis::Pool>(
          params, idem::redis::PoolParams{.size = static_cast<std::size_t>(writers)});
      idem::redis::Store store(pool);
      if (packed) store.ensure_schema();
      const std::int64_t start = used_memory(admin);
      write_all(ids, [&](int, const std::string& id) {
        auto out = idem::run_once(store, idem::Key{"PAY", id}, fixed_fingerprint(),
                                  [&] { return response; });
        if (!out.acquired()) throw std::runtime_error("a fresh key was not acquired");
      });
      return static_cast<double>(used_memory(admin) - start) / static_cast<double>(n);
    };
    const double library = idem_bytes(true);
    const double hashes = idem_bytes(false);

    admin.command({"FLUSHALL"});
    const std::int64_t before = used_memory(admin);
    {
      std::vector<std::unique_ptr<idem::redis::Connection>> raw(writers);
      write_all(ids, [&](int t, const std::string& id) {
        auto& c = raw[static_cast<std::size_t>(t)];
        if (!c) c = std::make_unique<idem::redis::Connection>(params);
        const std::string key = "dedup:PAY:" + id;
        c->command({"SET", key, text, "PX", ttl});
      });
    }
    const double baseline =
        static_cast<double>(used_memory(admin) - before) / static_cast<double>(n);
    admin.command({"FLUSHALL"});
    auto j = footprint_json("redis.footprint", bytes, n, library, baseline,
                            "INFO used_memory after minus before, per record");
    j["layout1_bytes_per_record"] = round_to(hashes, 1);
    j["library"] =
        "finished records of idem::redis::Store on a stamped prefix (the packed record and its "
        "entry in the bucket's expiry index), 64-character fingerprint, default prefix and "
        "buckets; layout1_bytes_per_record: the same as layout 1's hashes (an unstamped prefix)";
    j["baseline"] =
        "SET dedup:PAY:<id> <response> PX <ttl>: the response a hand-written dedup keeps";
    emit(j);
  }
}

// ---- MySQL ----

double table_bytes(idem::mysql::Connection& c, const std::string& table) {
  c.query("ANALYZE TABLE " + table);
  const auto rows = c.select(
      "SELECT data_length + index_length FROM information_schema.TABLES WHERE table_schema = "
      "DATABASE() AND table_name = ?",
      {idem::mysql::Param(table)});
  return static_cast<double>(rows.at(0).at(0).integer().value_or(0));
}

void mysql_footprint(const Config& config) {
  const std::size_t n = config.ops(50'000, 10'000);
  const idem::mysql::ConnectionParams params = mysql_bench::connection_params(config);
  idem::mysql::Connection admin(params);
  const auto ids = random_ids(n, 11);
  const std::string lib_table = "bench_footprint_lib";
  const std::string raw_table = "bench_footprint_raw";
  for (const std::size_t bytes : response_sizes) {
    const nlohmann::json response = response_of(bytes);
    const std::string text = response.dump();

    admin.query("DROP TABLE IF EXISTS " + lib_table);
    auto pool = std::make_shared<idem::mysql::Pool>(
        params, idem::mysql::PoolParams{.size = static_cast<std::size_t>(writers)});
    idem::mysql::Store store(pool, {.table = lib_table});
    store.ensure_schema();
    write_all(ids, [&](int, const std::string& id) {
      auto out = idem::run_once(store, idem::Key{"PAY", id}, fixed_fingerprint(),
                                [&] { return response; });
      if (!out.acquired()) throw std::runtime_error("a fresh key was not acquired");
    });
    const double library = table_bytes(admin, lib_table) / static_cast<double>(n);
    admin.query("DROP TABLE " + lib_table);

    admin.query("DROP TABLE IF EXISTS " + raw_table);
    admin.query("CREATE TABLE " + raw_table +
                " (idempotent_key VARBINARY(64) NOT NULL, biz_type VARBINARY(32) NOT NULL, "
                "response MEDIUMBLOB NULL, expire_at DATETIME(3) NOT NULL, PRIMARY KEY "
                "(idempotent_key, biz_type), KEY idx_expire (expire_at)) ENGINE=InnoDB");
    write_all(ids, [&](int, const std::string& id) {
      auto c = pool->acquire();
      c->execute(
          "INSERT INTO " + raw_table + " VALUES (?, 'PAY', ?, UTC_TIMESTAMP(3) + INTERVAL 1 DAY)",
          {idem::mysql::Param(id), idem::mysql::Param::blob(text)});
    });
    const double baseline = table_bytes(admin, raw_table) / static_cast<double>(n);
    admin.query("DROP TABLE " + raw_table);
    auto j = footprint_json("mysql.footprint", bytes, n, library, baseline,
                            "InnoDB data_length + index_length after ANALYZE TABLE, per record");
    j["library"] = "finished records of idem::mysql::Store: the record table and its two indexes";
    j["baseline"] =
        "a hand-written dedup table: (key, biz_type) primary key, the response, expire_at with "
        "its index";
    emit(j);
  }
}

}  // namespace

int run_footprint(const Config& config, const Selected& selected) {
  int failed = 0;
  if (selected("redis.footprint")) {
    failed += config.redis_socket.empty()
                  ? (progress("redis.footprint: skipped, no --redis-socket"), 1)
                  : attempt("redis.footprint", [&] { redis_footprint(config); });
  }
  if (selected("mysql.footprint")) {
    failed += config.socket.empty() ? (progress("mysql.footprint: skipped, no --socket"), 1)
                                    : attempt("mysql.footprint", [&] { mysql_footprint(config); });
  }
  return failed;
}

}  // namespace bench
