// redis.async_cycle and redis.async_cycle_setnx (issue 31): run_once on idem::redis::AsyncStore
// from ONE loop thread, every request pipelined on ONE connection, against one thread of bare
// hiredis pipelining on one connection
//  - redis.async_cycle: the same scripts (EVALSHA claim, then EVALSHA finish for the fresh
//    keys, the same keys and arguments), in batches of as many requests as the library keeps
//    in flight: all claims written, their replies read, then all finishes;
//  - redis.async_cycle_setnx: a hand-written dedup, SET NX of a marker then SET XX of the
//    response, pipelined the same way.
// Both sides on fresh keys, in the same run, alternating. loop_timer_late: how late a 1 ms
// timer on the loop fired while the library's requests were out; idle_timer_late: how late a
// thread doing nothing else woke during the baseline's rounds (what the machine alone causes).
#include <hiredis/hiredis.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"
#include "scenarios.hpp"

#ifdef IDEM_BENCH_ASYNC
#include <boost/asio/io_context.hpp>
#include <idem/redis/async.hpp>

#include "async_run.hpp"
#endif

namespace bench {

#ifdef IDEM_BENCH_ASYNC

namespace {

namespace net = idem::async::net;

const idem::Options options{};

// One bare hiredis connection that pipelines: append many commands, then read their replies.
class PipelinedRedis {
 public:
  explicit PipelinedRedis(const std::string& socket) : c_(redisConnectUnix(socket.c_str())) {
    if (c_ == nullptr || c_->err != 0) throw std::runtime_error("redisConnectUnix " + socket);
  }
  ~PipelinedRedis() { redisFree(c_); }
  PipelinedRedis(const PipelinedRedis&) = delete;
  PipelinedRedis& operator=(const PipelinedRedis&) = delete;

  void append(const std::vector<std::string_view>& args) {
    argv_.clear();
    lens_.clear();
    for (const std::string_view a : args) {
      argv_.push_back(a.data());
      lens_.push_back(a.size());
    }
    if (redisAppendCommandArgv(c_, static_cast<int>(args.size()), argv_.data(), lens_.data()) !=
        REDIS_OK) {
      throw std::runtime_error(std::string("hiredis: ") + c_->errstr);
    }
  }
  // The next reply, the caller's to free; error replies throw.
  redisReply* receive() {
    void* r = nullptr;
    if (redisGetReply(c_, &r) != REDIS_OK || r == nullptr)
      throw std::runtime_error(std::string("hiredis: ") + c_->errstr);
    auto* reply = static_cast<redisReply*>(r);
    if (reply->type == REDIS_REPLY_ERROR) {
      const std::string e(reply->str, reply->len);
      freeReplyObject(reply);
      throw std::runtime_error("redis: " + e);
    }
    return reply;
  }

 private:
  redisContext* c_;
  std::vector<const char*> argv_;
  std::vector<std::size_t> lens_;
};

void redis_async_cycle(const Config& config, bool setnx) {
  const std::string name = setnx ? "redis.async_cycle_setnx" : "redis.async_cycle";
  const std::size_t in_flight = 64;
  const std::size_t total = config.ops(60'000, 12'000);
  idem::redis::ConnectionParams params;
  params.unix_socket = config.redis_socket;
  idem::redis::Connection(params).command({"FLUSHALL"});
  net::io_context io(1);  // run by one thread: the bench thread of the library side
  auto pool = std::make_shared<idem::redis::AsyncPool>(io.get_executor(), params,
                                                       idem::PoolParams{.size = 1});
  idem::redis::AsyncStore store(pool, {.prefix = "bench-lib"});
  {
    std::vector<net::awaitable<void>> stamping;
    stamping.push_back([](idem::redis::AsyncStore& s) -> net::awaitable<void> {
      (void)co_await s.ensure_schema();
    }(store));
    run_all(io, std::move(stamping));
  }
  idem::redis::Store(std::make_shared<idem::redis::Pool>(params), {.prefix = "bench-raw"})
      .ensure_schema();
  const auto scripts = idem::redis::detail::make_record_scripts();
  const idem::redis::detail::Layout layout("bench-raw", 1024);
  {
    idem::redis::Connection c(params);
    for (const auto* s : {&scripts.claim, &scripts.finish})
      c.command({"SCRIPT", "LOAD", s->source});
  }
  long lib_runs = 0;
  long raw_runs = 0;
  LoopLateness lateness;
  LoopLateness idle_lateness;
  Side library{{}, [&](int, int r) {
                 Feed feed{r, total};
                 std::vector<net::awaitable<void>> requesters;
                 for (std::size_t k = 0; k < in_flight; ++k)
                   requesters.push_back(cycle_requester(store, feed, options));
                 run_all(io, std::move(requesters), &lateness);
                 lib_runs += feed.runs;
               }};
  std::unique_ptr<PipelinedRedis> raw;
  const std::string lease = std::to_string(options.lease.count());
  const std::string ttl = std::to_string(options.ttl.count());
  const std::string keep = std::to_string(std::chrono::milliseconds{std::chrono::hours{1}}.count());
  const std::string token(32, 'f');
  Side baseline{{}, [&](int, int r) {
                  const IdleTicker ticker(idle_lateness);
                  if (!raw) raw = std::make_unique<PipelinedRedis>(config.redis_socket);
                  const std::string snapshot = nlohmann::json{{"status", "paid"}}.dump();
                  for (std::size_t begin = 0; begin < total; begin += in_flight) {
                    const std::size_t end = std::min(total, begin + in_flight);
                    std::vector<std::string> members;
                    std::vector<idem::redis::detail::RecordKeys> keys;
                    for (std::size_t i = begin; i < end; ++i) {
                      members.push_back("BENCH:" + key_id(r, 1, i));
                      keys.push_back(layout.keys(members.back()));
                    }
                    for (std::size_t i = 0; i < members.size(); ++i) {
                      const auto& k = keys[i];
                      if (setnx) {
                        raw->append({"SET", k.record, "processing", "NX", "PX", ttl});
                      } else {
                        raw->append({"EVALSHA", scripts.claim.sha, "5", k.record, k.leases,
                                     k.expiry, k.unknown, k.layout, token, fixed_fingerprint(),
                                     lease, ttl, keep, members[i]});
                      }
                    }
                    std::vector<bool> fresh;
                    for (std::size_t i = 0; i < members.size(); ++i) {
                      redisReply* claimed = raw->receive();
                      fresh.push_back(setnx ? claimed->type == REDIS_REPLY_STATUS
                                            : claimed->element[0]->integer == 1);
                      freeReplyObject(claimed);
                    }
                    for (std::size_t i = 0; i < members.size(); ++i) {
                      if (!fresh[i]) throw std::runtime_error("a fresh key was not fresh");
                      ++raw_runs;
                      const auto& k = keys[i];
                      if (setnx) {
                        raw->append({"SET", k.record, snapshot, "XX", "PX", ttl});
                      } else {
                        raw->append({"EVALSHA", scripts.finish.sha, "5", k.record, k.leases,
                                     k.expiry, k.unknown, k.layout, "1", token, "succeeded",
                                     snapshot, "0", members[i]});
                      }
                    }
                    for (std::size_t i = 0; i < members.size(); ++i)
                      freeReplyObject(raw->receive());
                  }
                }};
  const auto t = alternate(name, config.rounds_per_side(), 1, total, library, baseline);
  auto j = throughput_json(name, 1, total, t, setnx ? ">= 0.7" : ">= 0.9");
  j["connections"] = 1;
  j["in_flight"] = in_flight;
  j["library_executions"] = lib_runs / config.rounds_per_side();
  j["baseline_executions"] = raw_runs / config.rounds_per_side();
  j["loop_timer_late"] = lateness.json();
  j["idle_timer_late"] = idle_lateness.json();
  j["library"] = fmt::format(
      "idem::async::run_once on redis::AsyncStore from one loop thread, {} requests in flight "
      "pipelined on one connection: claim script, no-op business, finish script with a small "
      "JSON, fresh keys",
      in_flight);
  j["baseline"] = setnx
                      ? fmt::format(
                            "bare hiredis on one thread and one connection, {} requests a batch: "
                            "SET key processing NX PX ttl for the batch, then SET key response XX "
                            "PX ttl (no fencing, fingerprint, lease or index)",
                            in_flight)
                      : fmt::format(
                            "bare hiredis on one thread and one connection, {} requests a batch: "
                            "EVALSHA of the same claim script for the batch, then of the same "
                            "finish script, with the same keys and arguments",
                            in_flight);
  emit(j);
}

}  // namespace

int run_redis_async(const Config& config, const Selected& selected) {
  int failed = 0;
  for (const bool setnx : {false, true}) {
    const std::string name = setnx ? "redis.async_cycle_setnx" : "redis.async_cycle";
    if (!selected(name)) continue;
    if (config.redis_socket.empty()) {
      progress(name + ": skipped, no --redis-socket");
      ++failed;
      continue;
    }
    failed += attempt(name, [&] { redis_async_cycle(config, setnx); });
  }
  return failed;
}

#else

int run_redis_async(const Config&, const Selected& selected) {
  int failed = 0;
  for (const char* name : {"redis.async_cycle", "redis.async_cycle_setnx"}) {
    if (!selected(name)) continue;
    progress(std::string(name) + ": idem-bench was built without idem::async (Boost.Asio 1.81)");
    ++failed;
  }
  return failed;
}

#endif

}  // namespace bench
