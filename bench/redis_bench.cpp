// redis.claim, redis.cycle, redis.mix: idem::redis::Store against bare hiredis sending the
// same scripts (EVALSHA, the same keys and arguments) in the same run; redis.cycle_setnx: the
// same cycle against the SET NX / SET XX a hand-written dedup would send; redis.batch: a
// consumer's claim_batch against one claim per message.
#include <hiredis/hiredis.h>

#include <atomic>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/batch.hpp>
#include <idem/idem.hpp>
#include <idem/redis.hpp>

#include "common.hpp"
#include "scenarios.hpp"

namespace bench {
namespace {

// One bare hiredis connection per thread of the baseline.
class RawRedis {
 public:
  explicit RawRedis(const std::string& socket) : c_(redisConnectUnix(socket.c_str())) {
    if (c_ == nullptr || c_->err != 0) throw std::runtime_error("redisConnectUnix " + socket);
  }
  ~RawRedis() { redisFree(c_); }
  RawRedis(const RawRedis&) = delete;
  RawRedis& operator=(const RawRedis&) = delete;

  // Sends a command; the reply is the caller's to free. Error replies throw.
  redisReply* run(std::initializer_list<std::string_view> args) {
    argv_.clear();
    lens_.clear();
    for (const std::string_view a : args) {
      argv_.push_back(a.data());
      lens_.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c_, static_cast<int>(args.size()), argv_.data(), lens_.data()));
    if (r == nullptr) throw std::runtime_error(std::string("hiredis: ") + c_->errstr);
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string e(r->str, r->len);
      freeReplyObject(r);
      throw std::runtime_error("redis: " + e);
    }
    return r;
  }

 private:
  redisContext* c_;
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
};

struct ScenarioShape {
  std::string name;
  bool complete;  // claim + complete (a cycle), or the claim alone
  bool mix;       // 12% duplicates
};

const idem::Options options{};

// The library's side of a scenario: an emptied server, and the store on a pool of one
// connection per thread, stamped (records packed, as a new deployment keeps them); the
// baseline's prefix is stamped too, so that its scripts pack as well.
struct LibraryStore {
  idem::redis::ConnectionParams params;
  std::shared_ptr<idem::redis::Pool> pool;
  idem::redis::Store store;
  LibraryStore(const Config& config, int threads)
      : params(flushed(config)),
        pool(std::make_shared<idem::redis::Pool>(
            params, idem::redis::PoolParams{.size = static_cast<std::size_t>(threads)})),
        store(pool, {.prefix = "bench-lib"}) {
    store.ensure_schema();
    idem::redis::Store(pool, {.prefix = "bench-raw"}).ensure_schema();
  }

  static idem::redis::ConnectionParams flushed(const Config& config) {
    idem::redis::ConnectionParams p;
    p.unix_socket = config.redis_socket;
    idem::redis::Connection(p).command({"FLUSHALL"});
    return p;
  }
};

void redis_scenario(const Config& config, const ScenarioShape& shape) {
  const int threads = config.threads > 0 ? config.threads : 32;
  const std::size_t per = config.ops(20'000, 4'000) / static_cast<std::size_t>(threads);
  const std::size_t total = per * static_cast<std::size_t>(threads);
  LibraryStore lib(config, threads);
  idem::redis::Store& store = lib.store;
  // The baseline sends the very scripts, keys and arguments the store sends.
  const auto scripts = idem::redis::detail::make_record_scripts();
  const idem::redis::detail::Layout layout("bench-raw", 1024);
  {
    idem::redis::Connection c(lib.params);
    for (const auto* s : {&scripts.claim, &scripts.finish})
      c.command({"SCRIPT", "LOAD", s->source});
  }
  auto id_of = [&](int r, int t, std::size_t i) {
    return shape.mix ? mix_key_id(r, t, i) : key_id(r, t, i);
  };
  std::atomic<long> lib_runs{0}, raw_runs{0};

  Side library{
      {}, [&](int t, int r) {
        long runs = 0;
        for (std::size_t i = 0; i < per; ++i) {
          const idem::Key key{"BENCH", id_of(r, t, i)};
          if (!shape.complete) {
            if (store.claim(key, fixed_fingerprint(), options).verdict != idem::Verdict::acquired)
              throw std::runtime_error("not acquired");
            ++runs;
            continue;
          }
          auto out = idem::run_once(
              store, key, fixed_fingerprint(),
              [&] {
                ++runs;
                return nlohmann::json{{"status", "paid"}};
              },
              options);
          if (!out) throw std::runtime_error("neither acquired nor replayed");
        }
        lib_runs += runs;
      }};

  auto raws = per_thread<RawRedis>(threads);
  const std::string lease = std::to_string(options.lease.count());
  const std::string ttl = std::to_string(options.ttl.count());
  const std::string keep = std::to_string(std::chrono::milliseconds{std::chrono::hours{1}}.count());
  Side baseline{{}, [&](int t, int r) {
                  auto& raw = raws[static_cast<std::size_t>(t)];
                  if (!raw) raw = std::make_unique<RawRedis>(config.redis_socket);
                  long runs = 0;
                  for (std::size_t i = 0; i < per; ++i) {
                    const std::string member = "BENCH:" + id_of(r, t, i);
                    const auto k = layout.keys(member);
                    const std::string token(32, 'f');
                    redisReply* claimed = raw->run({"EVALSHA", scripts.claim.sha, "5", k.record,
                                                    k.leases, k.expiry, k.unknown, k.layout, token,
                                                    fixed_fingerprint(), lease, ttl, keep, member});
                    const bool fresh = claimed->element[0]->integer == 1;
                    if (fresh) {
                      ++runs;
                    } else {
                      // A duplicate: its stored response is what the caller answers with.
                      const redisReply* fields = claimed->element[2];
                      if (fields->elements < 5 || fields->element[4]->type != REDIS_REPLY_STRING)
                        throw std::runtime_error("no stored response");
                      if (!nlohmann::json::parse(
                               std::string_view(fields->element[4]->str, fields->element[4]->len))
                               .is_object())
                        throw std::runtime_error("the stored response is no JSON object");
                    }
                    freeReplyObject(claimed);
                    if (!shape.complete || !fresh) continue;
                    const std::string snapshot = nlohmann::json{{"status", "paid"}}.dump();
                    freeReplyObject(raw->run({"EVALSHA", scripts.finish.sha, "5", k.record,
                                              k.leases, k.expiry, k.unknown, k.layout, "1", token,
                                              "succeeded", snapshot, "0", member}));
                  }
                  raw_runs += runs;
                }};
  const auto t = alternate(shape.name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(shape.name, threads, total, t, ">= 0.9");
  j["connections"] = threads;
  j["library_executions"] = lib_runs.load() / config.rounds_per_side();
  j["baseline_executions"] = raw_runs.load() / config.rounds_per_side();
  if (shape.mix) j["duplicates"] = 0.12;
  j["library"] = shape.complete ? "run_once on idem::redis::Store (claim script, no-op business, "
                                  "finish script with a small JSON; a duplicate replays)"
                                : "Store::claim of fresh keys (one claim script each)";
  j["baseline"] =
      "bare hiredis, one connection per thread: EVALSHA of the same scripts with the "
      "same keys and arguments";
  emit(j);
}

// The cycle a hand-written Redis dedup sends: SET NX of a marker, then SET XX of the
// response. Not equivalent (no fencing, no fingerprint, no lease to take over, no stale
// release): what the guarantees cost, next to the commands they replace.
void redis_setnx(const Config& config) {
  const std::string name = "redis.cycle_setnx";
  const int threads = config.threads > 0 ? config.threads : 32;
  const std::size_t per = config.ops(20'000, 4'000) / static_cast<std::size_t>(threads);
  const std::size_t total = per * static_cast<std::size_t>(threads);
  LibraryStore lib(config, threads);
  idem::redis::Store& store = lib.store;
  Side library{{}, [&](int t, int r) {
                 for (std::size_t i = 0; i < per; ++i) {
                   auto out = idem::run_once(
                       store, idem::Key{"BENCH", key_id(r, t, i)}, fixed_fingerprint(),
                       [&] {
                         return nlohmann::json{{"status", "paid"}};
                       },
                       options);
                   if (!out) throw std::runtime_error("neither acquired nor replayed");
                 }
               }};
  auto raws = per_thread<RawRedis>(threads);
  const std::string ttl = std::to_string(options.ttl.count());
  Side baseline{{}, [&](int t, int r) {
                  auto& raw = raws[static_cast<std::size_t>(t)];
                  if (!raw) raw = std::make_unique<RawRedis>(config.redis_socket);
                  for (std::size_t i = 0; i < per; ++i) {
                    const std::string key = "bench-raw:BENCH:" + key_id(r, t, i);
                    redisReply* set = raw->run({"SET", key, "processing", "NX", "PX", ttl});
                    const bool fresh = set->type == REDIS_REPLY_STATUS;
                    freeReplyObject(set);
                    if (!fresh) throw std::runtime_error("duplicate key");
                    const std::string snapshot = nlohmann::json{{"status", "paid"}}.dump();
                    freeReplyObject(raw->run({"SET", key, snapshot, "XX", "PX", ttl}));
                  }
                }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, library, baseline);
  auto j = throughput_json(name, threads, total, t, "report");
  j["connections"] = threads;
  j["library"] = "run_once on idem::redis::Store on fresh keys";
  j["baseline"] =
      "bare hiredis: SET key processing NX PX ttl, then SET key response XX PX ttl "
      "(no fencing, fingerprint, lease or index)";
  emit(j);
}

// A consumer's batch: idem::claim_batch of 100 fresh messages (one pipeline of claim scripts)
// against store.claim once per message, 4 consumers each on a connection of its own.
void redis_batch(const Config& config) {
  const std::string name = "redis.batch";
  const int threads = 4;
  const std::size_t batch = 100;
  const std::size_t per = config.ops(20'000, 4'000) / threads / batch * batch;
  const std::size_t total = per * threads;
  LibraryStore lib(config, threads);
  idem::redis::Store& batched_store = lib.store;
  idem::redis::Store single_store(lib.pool, {.prefix = "bench-raw"});
  auto requests = [&](int r, int t, std::size_t first) {
    std::vector<idem::ClaimRequest> out;
    out.reserve(batch);
    for (std::size_t i = first; i < first + batch; ++i)
      out.push_back({idem::Key{"BENCH", key_id(r, t, i)}, fixed_fingerprint()});
    return out;
  };
  Side batched{{}, [&](int t, int r) {
                 for (std::size_t first = 0; first < per; first += batch) {
                   const auto req = requests(r, t, first);
                   for (const auto& res : idem::claim_batch(batched_store, req, options))
                     if (res.verdict != idem::Verdict::acquired)
                       throw std::runtime_error("not acquired");
                 }
               }};
  Side single{{}, [&](int t, int r) {
                for (std::size_t first = 0; first < per; first += batch) {
                  const auto req = requests(r, t, first);
                  for (const auto& m : req)
                    if (single_store.claim(m.key, m.fingerprint, options).verdict !=
                        idem::Verdict::acquired)
                      throw std::runtime_error("not acquired");
                }
              }};
  const auto t = alternate(name, config.rounds_per_side(), threads, total, batched, single);
  auto j = throughput_json(name, threads, total, t, ">= 1.5");
  j["connections"] = threads;
  j["batch"] = batch;
  j["library"] =
      "idem::claim_batch of 100 fresh messages on idem::redis::Store (one pipeline of claim "
      "scripts)";
  j["baseline"] = "store.claim once per message (one claim script and round trip each)";
  emit(j);
}

}  // namespace

int run_redis(const Config& config, const Selected& selected) {
  int failed = 0;
  const ScenarioShape shapes[] = {
      {"redis.claim", false, false}, {"redis.cycle", true, false}, {"redis.mix", true, true}};
  for (const ScenarioShape& shape : shapes) {
    if (!selected(shape.name)) continue;
    if (config.redis_socket.empty()) {
      progress(shape.name + ": skipped, no --redis-socket");
      ++failed;
      continue;
    }
    failed += attempt(shape.name, [&] { redis_scenario(config, shape); });
  }
  if (selected("redis.batch")) {
    if (config.redis_socket.empty()) {
      progress("redis.batch: skipped, no --redis-socket");
      ++failed;
    } else {
      failed += attempt("redis.batch", [&] { redis_batch(config); });
    }
  }
  if (selected("redis.cycle_setnx")) {
    if (config.redis_socket.empty()) {
      progress("redis.cycle_setnx: skipped, no --redis-socket");
      ++failed;
    } else {
      failed += attempt("redis.cycle_setnx", [&] { redis_setnx(config); });
    }
  }
  return failed;
}

}  // namespace bench
