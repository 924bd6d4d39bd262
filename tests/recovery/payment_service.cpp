// The payment service of the recovery suite: a process that takes a workload of payments and
// charges each at the fake payment gateway (fake_gateway.cpp) through idem::run_once, on
// several threads, with an idem::Janitor running. The crash tests SIGKILL it and start it
// again many times, and count what the gateway charged.
//
//   idem_payment_service (--sqlite FILE | --mysql-socket S --mysql-database D [--mysql-table T]
//                         | --redis-socket S [--redis-prefix P])
//                        --gateway-port P --mode blind|steps|resolver --workload FILE
//                        [--threads 8] [--lease-ms 3000] [--janitor-ms 500]
//                        [--unknown-share N] [--unknown-retry-ms N] [--ask-every-claim-ms N]
//                        [--retry-pause-ms 100] [--gateway-timeout-ms 30000]
//                        [--progress-every 100]
//
// Every run delivers every line of the workload again, the way a broker redelivers what was
// not acknowledged; the duplicates are repeated lines. A line answered in_progress (another
// worker, or a dead one whose lease has not run out, holds the key) or whose delivery threw is
// delivered again after --retry-pause-ms. The service exits 0 once every line got another
// answer.
//
// Modes (the business of a line):
//   blind     charges the gateway with no key (the gateway runs in plain mode): a crash
//             between the charge and its record charges the trade again. Today's hazard.
//   steps     attempt.step("charge") sends attempt.step_key("charge") as Idempotency-Key (the
//             gateway runs in dedup mode), then the local step "receipt" writes a receipt row
//             in the store's database, committed with its recovery point (SQLite and MySQL).
//   resolver  charges with no key (plain gateway); a resolver for biz_type PAY asks the
//             gateway whether the trade was charged, on the claim path (Options::resolvers)
//             and in the Janitor. It answers unknown for --unknown-share N percent of the
//             trades (a stable choice), so that some records really end outcome_unknown;
//             --unknown-retry-ms is how soon the Janitor asks about those again. A charge
//             left without an answer (--gateway-timeout-ms) throws idem::EffectUnknown: the
//             record waits for the resolver instead of charging again.
//   --ask-every-claim-ms W: after a restore, every claim asks the resolver for W ms
//             (Resolvers::ask_every_claim_until).
//
// stdout, one line per write (the driver times its kills by them): "ready PID" once the store
// is open, "charging T" before each charge is sent, "charged T" once it was answered ("charged
// T replayed" when a deduplicating gateway answered with the charge the key already had),
// "resolved T happened|not_happened|unknown" for each resolver answer, "answered N" every
// --progress-every answers, and at the end "done lines=.. ran=.. replayed=.. unknown=..
// failed=.. conflict=.. in_progress=.. errors=..". Errors go to stderr.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <idem/idem.hpp>
#include <idem/janitor.hpp>
#include <idem/mysql.hpp>
#include <idem/resolver.hpp>
#include <idem/sqlite.hpp>
#ifdef IDEM_RECOVERY_REDIS
#include <idem/redis.hpp>
#endif

#include "gateway_client.hpp"
#include "payments.hpp"

namespace {

using namespace std::chrono_literals;
using idem_recovery::Payment;
using nlohmann::json;

enum class Mode { blind, steps, resolver };

struct Config {
  std::string sqlite;
  std::string mysql_socket, mysql_database, mysql_table = "idempotent_record";
  std::string redis_socket, redis_prefix = "idem";
  int gateway_port = 0;
  Mode mode = Mode::blind;
  std::string workload;
  int threads = 8;
  std::chrono::milliseconds lease{3000};
  std::chrono::milliseconds janitor{500};
  int unknown_share = 0;
  std::chrono::milliseconds unknown_retry{std::chrono::minutes{5}};
  std::chrono::milliseconds ask_every_claim{0};
  std::chrono::milliseconds retry_pause{100};
  std::chrono::milliseconds gateway_timeout{std::chrono::seconds{30}};
  int progress_every = 100;
};

// One line on stdout in one write(), so that the threads' lines never interleave.
void say(const std::string& text) {
  const std::string line = text + '\n';
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nobody reads any more: the driver is gone
    done += static_cast<std::size_t>(n);
  }
}

void complain(const std::string& text) {
  std::fprintf(stderr, "idem_payment_service: %s\n", text.c_str());
}

// How one delivery of a line ended.
enum class Answer { ran, replayed, unknown, failed, conflict, in_progress, error };

struct Tally {
  std::atomic<int> ran{0}, replayed{0}, unknown{0}, failed{0}, conflict{0}, in_progress{0},
      errors{0};

  void count(Answer a) {
    switch (a) {
      case Answer::ran:
        ++ran;
        break;
      case Answer::replayed:
        ++replayed;
        break;
      case Answer::unknown:
        ++unknown;
        break;
      case Answer::failed:
        ++failed;
        break;
      case Answer::conflict:
        ++conflict;
        break;
      case Answer::in_progress:
        ++in_progress;
        break;
      case Answer::error:
        ++errors;
        break;
    }
  }
};

// The lines still to answer, in workload order, then the ones to deliver again, each not
// before its pause ran out (pushed in that order, so the front is always due first).
class Deliveries {
 public:
  struct Item {
    std::size_t line;
    std::chrono::steady_clock::time_point not_before;
  };

  explicit Deliveries(std::size_t lines) {
    for (std::size_t i = 0; i < lines; ++i)
      queue_.push_back({i, {}});
  }

  // The next line to deliver, or nullopt once every line was answered.
  std::optional<Item> next() {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (!queue_.empty()) {
        const Item item = queue_.front();
        queue_.pop_front();
        ++busy_;
        return item;
      }
      if (busy_ == 0) return std::nullopt;
      changed_.wait(lock);  // a busy worker may put its line back
    }
  }

  void done(const Item& item, bool again, std::chrono::milliseconds pause) {
    {
      std::lock_guard lock(mutex_);
      --busy_;
      if (again) queue_.push_back({item.line, std::chrono::steady_clock::now() + pause});
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  std::size_t busy_ = 0;
};

template <class Out>
Answer answer_of(const Out& out) {
  if (out) return out.verdict() == idem::Verdict::replayed ? Answer::replayed : Answer::ran;
  if (out.failed()) return Answer::failed;
  switch (out.verdict()) {
    case idem::Verdict::in_progress:
      return Answer::in_progress;
    case idem::Verdict::outcome_unknown:
      return Answer::unknown;
    default:
      return Answer::conflict;
  }
}

template <class S>
class Service {
 public:
  Service(S& store, const Config& config, std::vector<Payment> payments)
      : store_(store),
        config_(config),
        payments_(std::move(payments)),
        gateway_(config.gateway_port, config.gateway_timeout) {}

  int run() {
    if (config_.mode == Mode::resolver) {
      resolvers_.add(std::string(idem_recovery::biz_type),
                     idem_recovery::gateway_resolver(
                         config_.gateway_port, config_.unknown_share,
                         [](const std::string& trade, idem::Resolution::Kind kind) {
                           say(fmt::format("resolved {} {}", trade, idem::to_string(kind)));
                         }),
                     {.time_limit = 2s});
      if (config_.ask_every_claim > 0ms) {
        resolvers_.ask_every_claim_until(idem::system_now() + config_.ask_every_claim);
      }
    }
    const idem::Resolvers* resolvers = config_.mode == Mode::resolver ? &resolvers_ : nullptr;
    options_ = idem::Options{.lease = config_.lease, .resolvers = resolvers};
    if (config_.mode == Mode::steps) prepare_receipts();

    idem::Janitor<S> janitor{store_,
                             {.interval = config_.janitor,
                              .resolvers = resolvers,
                              .resolve_batch = 1000,
                              .unknown_retry = config_.unknown_retry}};
    say(fmt::format("ready {}", ::getpid()));

    Deliveries deliveries(payments_.size());
    std::vector<std::thread> workers;
    for (int t = 0; t < config_.threads; ++t) {
      workers.emplace_back([&] {
        while (const std::optional<Deliveries::Item> item = deliveries.next()) {
          std::this_thread::sleep_until(item->not_before);
          const Answer a = deliver(payments_[item->line]);
          tally_.count(a);
          const bool again = a == Answer::in_progress || a == Answer::error;
          if (!again && ++answered_ % config_.progress_every == 0) {
            say(fmt::format("answered {}", answered_.load()));
          }
          deliveries.done(*item, again, config_.retry_pause);
        }
      });
    }
    for (std::thread& w : workers)
      w.join();
    say(fmt::format(
        "done lines={} ran={} replayed={} unknown={} failed={} conflict={} in_progress={} "
        "errors={}",
        payments_.size(), tally_.ran.load(), tally_.replayed.load(), tally_.unknown.load(),
        tally_.failed.load(), tally_.conflict.load(), tally_.in_progress.load(),
        tally_.errors.load()));
    return 0;
  }

 private:
  Answer deliver(const Payment& p) {
    try {
      const idem::Key key = idem_recovery::key_of(p);
      const std::string fp = idem_recovery::fingerprint_of(p);
      if (config_.mode == Mode::steps) {
        return answer_of(idem::run_once(
            store_, key, fp, [&](idem::Attempt<S>& attempt) { return in_steps(attempt, p); },
            options_));
      }
      return answer_of(idem::run_once(
          store_, key, fp, [&] { return charge(p, std::nullopt); }, options_));
    } catch (const std::exception& e) {
      complain(fmt::format("{}: {}", idem_recovery::trade_id(p.trade), e.what()));
      return Answer::error;
    }
  }

  // The external effect. Throws GatewayError when the gateway does not answer 200 (the
  // business then fails retryably and the line is delivered again).
  json charge(const Payment& p, std::optional<std::string> key) {
    const std::string trade = idem_recovery::trade_id(p.trade);
    say("charging " + trade);
    std::optional<idem_test::Charge> answered;
    try {
      answered = gateway_.charge(trade, p.amount, key);
    } catch (const idem_test::GatewayError& e) {
      // No answer to a charge sent without a key: it may be in the ledger, and sending it
      // again could charge twice. Only a lookup can tell: the record waits for the resolver.
      if (e.status() == 0 && !key && config_.mode == Mode::resolver) {
        throw idem::EffectUnknown(e.what());
      }
      throw;
    }
    const idem_test::Charge& c = *answered;
    say("charged " + trade + (c.replayed ? " replayed" : ""));
    return idem_recovery::charge_response(c);
  }

  json in_steps(idem::Attempt<S>& attempt, const Payment& p) {
    json response = attempt.step("charge", [&] { return charge(p, attempt.step_key("charge")); });
    if constexpr (has_receipts) {
      response["receipt_of"] = receipt(attempt, p, response.at("charge_id").get<std::int64_t>());
    }
    return response;
  }

  static constexpr bool has_receipts =
      std::is_same_v<S, idem::sqlite::Store> || std::is_same_v<S, idem::mysql::Store>;

  // The local step: a receipt row in the store's own database, written in one transaction
  // with the step's recovery point, so that a crash leaves both or neither (the tests count
  // one receipt per trade). Its result is the charge it is the receipt of.
  std::int64_t receipt(idem::Attempt<S>& attempt, const Payment& p, std::int64_t charge_id) {
    const std::string trade = idem_recovery::trade_id(p.trade);
    if constexpr (std::is_same_v<S, idem::sqlite::Store>) {
      return idem::sqlite::with_transaction(store_.pool(), [&](idem::sqlite::Connection& c) {
        auto tx = store_.bind(c);
        return attempt.step(tx, "receipt", [&] {
          c.execute("INSERT INTO receipts (trade, charge_id) VALUES (?, ?)", {trade, charge_id});
          return charge_id;
        });
      });
    } else if constexpr (std::is_same_v<S, idem::mysql::Store>) {
      return idem::mysql::with_transaction(store_.pool(), [&](idem::mysql::Connection& c) {
        auto tx = store_.bind(c);
        return attempt.step(tx, "receipt", [&] {
          c.execute("INSERT INTO `" + config_.mysql_table +
                        "_receipts` (trade, charge_id) "
                        "VALUES (?, ?)",
                    {trade, charge_id});
          return charge_id;
        });
      });
    } else {
      return charge_id;
    }
  }

  void prepare_receipts() {
    if constexpr (std::is_same_v<S, idem::sqlite::Store>) {
      store_.pool().acquire()->exec(
          "CREATE TABLE IF NOT EXISTS receipts (id INTEGER PRIMARY KEY, trade TEXT NOT NULL,"
          " charge_id INTEGER NOT NULL)");
    } else if constexpr (std::is_same_v<S, idem::mysql::Store>) {
      store_.pool().acquire()->query(
          "CREATE TABLE IF NOT EXISTS `" + config_.mysql_table +
          "_receipts` (id BIGINT AUTO_INCREMENT PRIMARY KEY, trade VARBINARY(64) NOT NULL,"
          " charge_id BIGINT NOT NULL) ENGINE=InnoDB");
    }
  }

  S& store_;
  const Config& config_;
  std::vector<Payment> payments_;
  idem_test::GatewayClient gateway_;
  idem::Resolvers resolvers_;
  idem::Options options_;
  Tally tally_;
  std::atomic<int> answered_{0};
};

template <class S>
int serve(S& store, const Config& config, std::vector<Payment> payments) {
  Service<S> service(store, config, std::move(payments));
  return service.run();
}

int usage() {
  std::fputs(
      "usage: idem_payment_service (--sqlite FILE | --mysql-socket S --mysql-database D\n"
      "         [--mysql-table T] | --redis-socket S [--redis-prefix P])\n"
      "       --gateway-port P --mode blind|steps|resolver --workload FILE [--threads N]\n"
      "       [--lease-ms N] [--janitor-ms N] [--unknown-share N] [--unknown-retry-ms N]\n"
      "       [--ask-every-claim-ms N] [--retry-pause-ms N] [--gateway-timeout-ms N]\n"
      "       [--progress-every N]\n",
      stderr);
  return 2;
}

std::optional<Config> parse_args(int argc, char** argv) {
  Config c;
  bool has_mode = false;
  const auto ms = [](const std::string& v) { return std::chrono::milliseconds{std::stoll(v)}; };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 == argc) return std::nullopt;  // every option takes a value
    const std::string v = argv[++i];
    if (arg == "--sqlite") {
      c.sqlite = v;
    } else if (arg == "--mysql-socket") {
      c.mysql_socket = v;
    } else if (arg == "--mysql-database") {
      c.mysql_database = v;
    } else if (arg == "--mysql-table") {
      c.mysql_table = v;
    } else if (arg == "--redis-socket") {
      c.redis_socket = v;
    } else if (arg == "--redis-prefix") {
      c.redis_prefix = v;
    } else if (arg == "--gateway-port") {
      c.gateway_port = std::stoi(v);
    } else if (arg == "--mode" && (v == "blind" || v == "steps" || v == "resolver")) {
      c.mode = v == "blind" ? Mode::blind : v == "steps" ? Mode::steps : Mode::resolver;
      has_mode = true;
    } else if (arg == "--workload") {
      c.workload = v;
    } else if (arg == "--threads") {
      c.threads = std::stoi(v);
    } else if (arg == "--lease-ms") {
      c.lease = ms(v);
    } else if (arg == "--janitor-ms") {
      c.janitor = ms(v);
    } else if (arg == "--unknown-share") {
      c.unknown_share = std::stoi(v);
    } else if (arg == "--unknown-retry-ms") {
      c.unknown_retry = ms(v);
    } else if (arg == "--ask-every-claim-ms") {
      c.ask_every_claim = ms(v);
    } else if (arg == "--retry-pause-ms") {
      c.retry_pause = ms(v);
    } else if (arg == "--gateway-timeout-ms") {
      c.gateway_timeout = ms(v);
    } else if (arg == "--progress-every") {
      c.progress_every = std::stoi(v);
    } else {
      return std::nullopt;
    }
  }
  const int stores = (c.sqlite.empty() ? 0 : 1) + (c.mysql_socket.empty() ? 0 : 1) +
                     (c.redis_socket.empty() ? 0 : 1);
  if (stores != 1 || !has_mode || c.workload.empty() || c.gateway_port <= 0 || c.threads < 1 ||
      c.lease <= 0ms || c.janitor <= 0ms || c.unknown_share < 0 || c.unknown_share > 100 ||
      c.progress_every < 1 || (!c.mysql_socket.empty() && c.mysql_database.empty())) {
    return std::nullopt;
  }
  return c;
}

int run(const Config& config) {
  std::vector<Payment> payments = idem_recovery::read_workload(config.workload);
  const auto pool_size = static_cast<std::size_t>(config.threads) + 4;  // + Janitor, receipts
  if (!config.sqlite.empty()) {
    idem::sqlite::Store store{config.sqlite, {.pool_size = pool_size}};
    return serve(store, config, std::move(payments));
  }
  if (!config.mysql_socket.empty()) {
    idem::mysql::ConnectionParams params;
    params.unix_socket = config.mysql_socket;
    params.database = config.mysql_database;
    auto pool =
        std::make_shared<idem::mysql::Pool>(params, idem::mysql::PoolParams{.size = pool_size});
    idem::mysql::Store store{pool, {.table = config.mysql_table}};
    store.ensure_schema();
    return serve(store, config, std::move(payments));
  }
#ifdef IDEM_RECOVERY_REDIS
  idem::redis::ConnectionParams params;
  params.unix_socket = config.redis_socket;
  auto pool =
      std::make_shared<idem::redis::Pool>(params, idem::redis::PoolParams{.size = pool_size});
  idem::redis::Store store{pool, {.prefix = config.redis_prefix}};
  return serve(store, config, std::move(payments));
#else
  complain("this build has no Redis store (hiredis was not found)");
  return 2;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Config> config;
  try {
    config = parse_args(argc, argv);
  } catch (const std::exception&) {  // std::stoi on a value that is no number
  }
  if (!config) return usage();
  ::signal(SIGPIPE, SIG_IGN);  // a gateway that went away is an error answer, not a death
  try {
    return run(*config);
  } catch (const std::exception& e) {
    complain(e.what());
    return 1;
  }
}
