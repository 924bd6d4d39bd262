// The articles' payment callback (notifyPayResult), with both defences:
//  - the idempotency guard, keyed by the channel's trade number, stops repeated execution:
//    a gateway retry replays the first answer;
//  - the state machine stops illegal or repeated state changes: the order moves
//    pending -> paid only from pending (and only from the version the handler read), so a
//    callback that finds the order closed, or a second payment of an already paid order,
//    is rejected instead of being applied.
// On MySQL both run in one transaction (record + order update commit together); without a
// server, MemoryStore + MemoryTable give the same answers in-process.
//
//   idem_payment_callback                          in memory
//   idem_payment_callback --mysql-socket PATH      on MySQL / MariaDB (or env IDEM_MYSQL_SOCKET)
//                         [--mysql-database NAME]  default idem_test
//
// Load: 11 orders, one of them closed by the order-timeout job before its callbacks arrive;
// 58 callbacks (the 11 originals and 47 gateway retries), plus one order paid a second time
// through the channel (a second trade number), delivered by 8 gateway threads at once.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <idem/idem.hpp>
#include <idem/mysql.hpp>
#include <idem/testing/memory_table.hpp>

namespace {

enum class OrderStatus { pending = 0, paid = 1, completed = 2, refunded = 3, closed = 4 };
using enum OrderStatus;

const char* name(OrderStatus s) {
  switch (s) {
    case pending:
      return "pending";
    case paid:
      return "paid";
    case completed:
      return "completed";
    case refunded:
      return "refunded";
    case closed:
      return "closed";
  }
  return "?";
}

idem::StateMachine<OrderStatus> order_machine(const std::string& table) {
  return {{.table = table, .key_column = "order_no", .version_column = "version"},
          {{pending, paid}, {pending, closed}, {paid, completed}, {paid, refunded}}};
}

struct Callback {
  std::string trade_no;  // the channel's trade number: the idempotency key
  std::string order_no;
  long amount_fen = 0;
};

enum class Verdict { executed, replayed, rejected, busy, conflict };

struct Answer {
  Verdict verdict = Verdict::conflict;
  std::string detail{};  // why a transition was rejected
};

struct Counters {
  std::atomic<int> executed{0}, replayed{0}, rejected{0}, busy{0}, conflict{0}, gave_up{0};
};

// The handler, for any idem store: `pay(order_no)` moves the order pending -> paid through the
// state machine and returns the TransitionResult.
template <class S, class Pay>
Answer on_pay_result(S& store, const Callback& cb, Pay&& pay) {
  const auto fp = idem::fingerprint(nlohmann::json{
      {"trade_no", cb.trade_no}, {"order_no", cb.order_no}, {"amount_fen", cb.amount_fen}});
  // wait: a duplicate that arrives mid-flight waits for the first answer instead of a 409.
  idem::IdempotencyGuard guard{store, idem::Key{"PAY", cb.trade_no}, fp,
                               idem::Options{.wait = std::chrono::seconds{2}}};
  switch (guard.verdict()) {
    case idem::Verdict::acquired: {
      const idem::TransitionResult<OrderStatus> r = pay(cb.order_no);
      if (r) {
        guard.commit(nlohmann::json{{"result", "paid"}, {"order_no", cb.order_no}});
        return {Verdict::executed};
      }
      // An expected outcome, recorded like a success: every retry of this trade number gets
      // the same answer (and the payment goes to manual refund, not to the order).
      const std::string status = r.status ? name(*r.status) : "unknown";
      guard.commit(nlohmann::json{{"result", "rejected"},
                                  {"order_no", cb.order_no},
                                  {"reason", idem::to_string(r.reason)},
                                  {"order_status", status}});
      return {Verdict::rejected, cb.trade_no + " for " + cb.order_no + ": " +
                                     std::string(idem::to_string(r.reason)) + ", the order is " +
                                     status};
    }
    case idem::Verdict::replayed:
      return {Verdict::replayed};
    case idem::Verdict::in_progress:
      return {Verdict::busy};
    case idem::Verdict::conflict:
      return {Verdict::conflict};
    case idem::Verdict::outcome_unknown:
      // An earlier attempt died mid-effect and no one can tell yet (docs/recovery.md): like
      // busy, the gateway retries later. (This example registers no resolver.)
      return {Verdict::busy};
  }
  return {Verdict::conflict};
}

std::int64_t to_int(const idem::SqlValue& v) {
  return std::stoll(v.text().value_or("0"));
}

// Everything one run needs, on MySQL or in memory.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;
  virtual void add_order(const std::string& order_no, OrderStatus status) = 0;
  virtual Answer handle(const Callback& cb) = 0;
  virtual std::vector<std::pair<std::string, OrderStatus>> orders() = 0;
  virtual const idem::StateMachine<OrderStatus>& machine() const = 0;
  // How this backend runs a transition (the SQL it sends, or what the memory table applies).
  virtual std::string rendered(const idem::GuardedTransition& t) const = 0;
};

class MemoryBackend : public Backend {
 public:
  std::string describe() const override { return "in memory: MemoryStore + MemoryTable"; }
  void add_order(const std::string& order_no, OrderStatus status) override {
    table_.insert({{"order_no", order_no}, {"status", machine_.stored(status)}, {"version", 0}});
  }
  Answer handle(const Callback& cb) override {
    return on_pay_result(store_, cb, [&](const std::string& order_no) {
      const auto version = to_int(table_.find(order_no)->at("version"));
      return table_.apply(machine_, order_no, pending, paid, version, {.explain = true});
    });
  }
  std::vector<std::pair<std::string, OrderStatus>> orders() override {
    std::vector<std::pair<std::string, OrderStatus>> out;
    for (const auto& row : table_.rows())
      out.emplace_back(*row.at("order_no").text(),
                       machine_.status_of(*row.at("status").text()).value_or(pending));
    return out;
  }
  const idem::StateMachine<OrderStatus>& machine() const override { return machine_; }
  std::string rendered(const idem::GuardedTransition& t) const override {
    std::ostringstream os;
    os << t;
    return os.str();
  }

 private:
  idem::StateMachine<OrderStatus> machine_ = order_machine("t_order");
  idem::MemoryStore store_;
  idem::testing::MemoryTable table_{machine_};
};

class MysqlBackend : public Backend {
 public:
  MysqlBackend(const std::string& socket, const std::string& database)
      : socket_(socket),
        pool_(std::make_shared<idem::mysql::Pool>(params(socket, database),
                                                  idem::mysql::PoolParams{.size = 8})),
        // Tables of this run only, dropped at the end.
        orders_table_("t_order_example_" + std::to_string(::getpid())),
        store_(pool_, {.table = "idempotent_record_example_" + std::to_string(::getpid())}),
        machine_(order_machine(orders_table_)),
        orders_(idem::mysql::quote_identifier(orders_table_)) {
    store_.ensure_schema();
    auto c = pool_->acquire();
    c->query("CREATE TABLE " + orders_ +
             " (order_no VARCHAR(32) NOT NULL PRIMARY KEY, status TINYINT NOT NULL, "
             "version INT NOT NULL DEFAULT 0) ENGINE=InnoDB");
  }
  ~MysqlBackend() override {
    try {
      auto c = pool_->acquire();
      c->query("DROP TABLE IF EXISTS " + orders_ + ", " + store_.table());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cleanup failed: %s\n", e.what());
    }
  }
  std::string describe() const override { return "MySQL at " + socket_ + ", one transaction"; }
  void add_order(const std::string& order_no, OrderStatus status) override {
    auto c = pool_->acquire();
    idem::mysql::execute(*c, {"INSERT INTO " + orders_ + " (order_no, status) VALUES (?, ?)",
                              {order_no, machine_.stored(status)}});
  }
  Answer handle(const Callback& cb) override {
    // Claim, order update and record commit or roll back together; a deadlock re-runs all.
    return idem::mysql::with_transaction(*pool_, [&](idem::mysql::Connection& c) {
      auto tx = store_.bind(c);
      return on_pay_result(tx, cb, [&](const std::string& order_no) {
        const auto rows =
            c.select("SELECT version FROM " + orders_ + " WHERE order_no = ?", {order_no});
        const std::int64_t version = rows.empty() ? 0 : rows[0][0].integer().value_or(0);
        return idem::mysql::apply(c, machine_, order_no, pending, paid, version, {.explain = true});
      });
    });
  }
  std::vector<std::pair<std::string, OrderStatus>> orders() override {
    auto c = pool_->acquire();
    std::vector<std::pair<std::string, OrderStatus>> out;
    for (const auto& row : c->select("SELECT order_no, status FROM " + orders_, {}))
      out.emplace_back(*row[0].to_text(),
                       machine_.status_of(row[1].to_text().value_or("")).value_or(pending));
    return out;
  }
  const idem::StateMachine<OrderStatus>& machine() const override { return machine_; }
  std::string rendered(const idem::GuardedTransition& t) const override {
    return idem::mysql::update_statement(t).sql;
  }

 private:
  static idem::mysql::ConnectionParams params(const std::string& socket,
                                              const std::string& database) {
    idem::mysql::ConnectionParams p;
    p.unix_socket = socket;
    p.database = database;
    return p;
  }

  std::string socket_;
  std::shared_ptr<idem::mysql::Pool> pool_;
  std::string orders_table_;
  idem::mysql::Store store_;
  idem::StateMachine<OrderStatus> machine_;
  std::string orders_;  // the orders table, quoted for MySQL
};

int run(Backend& backend) {
  constexpr int orders = 11;
  constexpr int duplicates = 47;
  constexpr int threads = 8;

  std::vector<Callback> originals;
  for (int i = 0; i < orders; ++i) {
    originals.push_back({"CH2026113017" + std::to_string(1000 + i),
                         "A2026113017" + std::to_string(100 + i), 29'900});
    // The last order timed out and was closed before any of its callbacks arrived.
    backend.add_order(originals.back().order_no, i == orders - 1 ? closed : pending);
  }
  std::vector<Callback> callbacks = originals;
  std::mt19937 rng(47);
  for (int d = 0; d < duplicates; ++d)
    callbacks.push_back(callbacks[rng() % orders]);
  // The user of the first order paid twice: a second trade number for the same order.
  callbacks.push_back({"CH2026113017" + std::to_string(2000), originals[0].order_no, 29'900});
  std::shuffle(callbacks.begin(), callbacks.end(), rng);

  Counters counters;
  std::atomic<std::size_t> next{0};
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> gateway;
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::vector<std::string> rejections;
  for (int t = 0; t < threads; ++t) {
    gateway.emplace_back([&] {
      for (std::size_t i = next++; i < callbacks.size(); i = next++) {
        try {
          Answer a = backend.handle(callbacks[i]);
          for (int retry = 0; a.verdict == Verdict::busy && retry < 3; ++retry) {
            ++counters.busy;
            std::this_thread::sleep_for(std::chrono::milliseconds{200});  // the gateway's retry
            a = backend.handle(callbacks[i]);
          }
          switch (a.verdict) {
            case Verdict::executed:
              ++counters.executed;
              break;
            case Verdict::replayed:
              ++counters.replayed;
              break;
            case Verdict::rejected: {
              ++counters.rejected;
              std::lock_guard lock(mutex);
              rejections.push_back(std::move(a.detail));
              break;
            }
            case Verdict::conflict:
              ++counters.conflict;
              break;
            case Verdict::busy:
              ++counters.gave_up;
              break;
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "callback %s failed: %s\n", callbacks[i].trade_no.c_str(), e.what());
          failed = true;
        }
      }
    });
  }
  for (auto& th : gateway)
    th.join();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);

  int paid_orders = 0;
  int closed_orders = 0;
  for (const auto& [order_no, status] : backend.orders()) {
    paid_orders += status == paid;
    closed_orders += status == closed;
  }

  std::printf("idem payment callback: guard + state machine (%s)\n", backend.describe().c_str());
  std::printf("  transition:     %s\n",
              backend.rendered(backend.machine().transition("A1", pending, paid, 0)).c_str());
  std::printf("  orders:         %d (1 closed by the timeout job before its callbacks)\n", orders);
  std::printf("  callbacks:      %zu (%d gateway retries, 1 second payment), %d threads\n",
              callbacks.size(), duplicates, threads);
  std::printf("  executed:       %d  (order moved pending -> paid)\n", counters.executed.load());
  std::printf("  replayed:       %d  (retries answered from the record)\n",
              counters.replayed.load());
  std::printf("  rejected:       %d  (transition refused: the order had moved on)\n",
              counters.rejected.load());
  std::sort(rejections.begin(), rejections.end());
  for (const auto& r : rejections)
    std::printf("                  %s\n", r.c_str());
  std::printf("  in progress:    %d, conflicts: %d, gave up: %d\n", counters.busy.load(),
              counters.conflict.load(), counters.gave_up.load());
  std::printf("  orders now:     %d paid, %d closed\n", paid_orders, closed_orders);
  std::printf("  took:           %lld ms\n", static_cast<long long>(ms.count()));

  const bool ok = !failed && counters.executed == orders - 1 && counters.rejected == 2 &&
                  counters.replayed == duplicates && counters.conflict == 0 &&
                  counters.gave_up == 0 && paid_orders == orders - 1 && closed_orders == 1;
  std::printf("%s\n", ok ? "OK: every order changed state at most once, and only legally"
                         : "FAILED: unexpected answers");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket;
  if (const char* env = std::getenv("IDEM_MYSQL_SOCKET")) socket = env;
  std::string database = "idem_test";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--mysql-socket" && i + 1 < argc) {
      socket = argv[++i];
    } else if (arg == "--mysql-database" && i + 1 < argc) {
      database = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--mysql-socket PATH] [--mysql-database NAME]\n", argv[0]);
      return 2;
    }
  }
  try {
    std::unique_ptr<Backend> backend;
    if (socket.empty()) {
      backend = std::make_unique<MemoryBackend>();
    } else {
      backend = std::make_unique<MysqlBackend>(socket, database);
    }
    return run(*backend);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_payment_callback: %s\n", e.what());
    return 1;
  }
}
