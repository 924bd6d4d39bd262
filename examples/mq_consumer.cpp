// The articles' second incident, replayed: an at-least-once broker redelivers order-creation
// messages (a consumer-group rebalance replays everything delivered so far, and 12.3% of the
// acknowledgements are lost on top), so a consumer that simply inserts an order row per
// delivery writes 1,842 orders more than once. Consumed through idem::consume, each order is
// created exactly once.
//
// The consumer runs in same-transaction mode: the idempotency record and the order row are
// written in one database transaction, so a crash between them is impossible by construction.
// The key is the order number carried by the message (biz type "order.create"), never the
// broker's delivery id, which is new on every redelivery.
//
//   idem_mq_consumer [--db PATH | --mysql-socket PATH] [--batch N] [--unguarded]
//
// Exit code 0 only when every order exists exactly once (with --unguarded: always 0, it shows
// the duplicates).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <idem/idem.hpp>
#include <idem/sqlite.hpp>
#ifdef IDEM_DEMO_WITH_MYSQL
#include <idem/mysql.hpp>
#endif

namespace {

constexpr int messages = 1842;
constexpr double lost_ack_rate = 0.123;  // the incident's duplicate share of all calls
constexpr int consumer_threads = 4;

struct Message {
  std::uint64_t delivery_id;  // new on every delivery: useless as an idempotency key
  int order_no;
};

// An in-process at-least-once broker. A delivery that is not acknowledged comes back; some
// acknowledgements are lost; and when half the messages were delivered, a rebalance replays
// every message delivered so far.
class Broker {
 public:
  explicit Broker(unsigned seed) : rng_(seed) {
    for (int i = 0; i < messages; ++i)
      queue_.push_back(i);
  }

  std::vector<Message> poll(std::size_t max) {
    std::lock_guard lock(mutex_);
    std::vector<Message> out;
    while (out.size() < max && !queue_.empty()) {
      out.push_back({++deliveries_, queue_.front()});
      delivered_.push_back(queue_.front());
      queue_.pop_front();
    }
    if (!rebalanced_ && delivered_.size() >= messages / 2) {
      rebalanced_ = true;
      queue_.insert(queue_.end(), delivered_.begin(), delivered_.end());
    }
    return out;
  }

  void ack(const Message& m, bool commit) {
    std::lock_guard lock(mutex_);
    if (!commit || std::uniform_real_distribution<>(0, 1)(rng_) < lost_ack_rate)
      queue_.push_back(m.order_no);
  }

  std::uint64_t deliveries() {
    std::lock_guard lock(mutex_);
    return deliveries_;
  }
  bool idle() {
    std::lock_guard lock(mutex_);
    return queue_.empty();
  }

 private:
  std::mutex mutex_;
  std::mt19937 rng_;
  std::deque<int> queue_;
  std::vector<int> delivered_;
  std::uint64_t deliveries_ = 0;
  bool rebalanced_ = false;
};

std::string order_id(int order_no) {
  return "SO" + std::to_string(100000 + order_no);
}

struct Tally {
  std::atomic<int> created{0}, replayed{0}, retried{0}, errors{0};
};

// Runs the consumers until the broker has nothing left. `consume_some` handles one polled
// batch and returns one commit flag per message.
template <class ConsumeSome>
void drain(Broker& broker, std::size_t batch, Tally& tally, ConsumeSome consume_some) {
  std::vector<std::thread> threads;
  for (int t = 0; t < consumer_threads; ++t) {
    threads.emplace_back([&] {
      int idle_polls = 0;
      while (idle_polls < 50) {  // others may still put messages back: wait a little
        const auto polled = broker.poll(batch);
        if (polled.empty()) {
          ++idle_polls;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          continue;
        }
        idle_polls = 0;
        std::vector<bool> commits(polled.size(), false);
        try {
          commits = consume_some(polled);
        } catch (const std::exception& e) {
          if (tally.errors++ == 0) std::fprintf(stderr, "consumer error: %s\n", e.what());
        }
        for (std::size_t i = 0; i < polled.size(); ++i)
          broker.ack(polled[i], commits[i]);
      }
    });
  }
  for (auto& th : threads)
    th.join();
}

// The order table and the transaction of one backend.
struct SqliteBackend {
  idem::sqlite::Store& store;
  void reset() {
    store.pool().acquire()->exec(
        "DROP TABLE IF EXISTS mq_order; CREATE TABLE mq_order (id INTEGER PRIMARY KEY "
        "AUTOINCREMENT, order_no TEXT NOT NULL, amount_fen INTEGER NOT NULL)");
    store.pool().acquire()->exec("DELETE FROM " + store.table() +
                                 " WHERE biz_type = 'order.create'");
  }
  // The legacy table has no unique key on order_no: only idem stands between a redelivery
  // and a second row.
  template <class Body>
  auto transaction(Body&& body) {
    return idem::sqlite::with_transaction(store.pool(), [&](idem::sqlite::Connection& c) {
      auto tx = store.bind(c);
      return body(tx, [&c](int order_no) {
        c.execute("INSERT INTO mq_order (order_no, amount_fen) VALUES (?, ?)",
                  {order_id(order_no), 29900});
      });
    });
  }
  std::pair<long, long> rows() {
    auto c = store.pool().acquire();
    auto r = c->query("SELECT COUNT(*), COUNT(DISTINCT order_no) FROM mq_order");
    r.next();
    return {r.integer(0), r.integer(1)};
  }
};

#ifdef IDEM_DEMO_WITH_MYSQL
struct MysqlBackend {
  idem::mysql::Store& store;
  idem::mysql::Pool& pool;
  void reset() {
    auto c = pool.acquire();
    c->query("DROP TABLE IF EXISTS mq_order");
    c->query(
        "CREATE TABLE mq_order (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(32) NOT "
        "NULL, amount_fen BIGINT NOT NULL) ENGINE=InnoDB");
    c->query("DELETE FROM " + store.table() + " WHERE biz_type = 'order.create'");
  }
  template <class Body>
  auto transaction(Body&& body) {
    return idem::mysql::with_transaction(pool, [&](idem::mysql::Connection& c) {
      auto tx = store.bind(c);
      return body(tx, [&c](int order_no) {
        c.execute("INSERT INTO mq_order (order_no, amount_fen) VALUES (?, ?)",
                  {order_id(order_no), 29900});
      });
    });
  }
  std::pair<long, long> rows() {
    const auto r =
        pool.acquire()->select("SELECT COUNT(*), COUNT(DISTINCT order_no) FROM mq_order", {});
    return {r.at(0).at(0).integer<long>().value(), r.at(0).at(1).integer<long>().value()};
  }
};
#endif

template <class Backend>
int run(Backend& backend, const std::string& where, std::size_t batch, bool guarded) {
  backend.reset();
  Broker broker(42);
  Tally tally;
  std::printf("consuming %d order-creation messages on %s (%d consumers, batches of %zu, %s)\n",
              messages, where.c_str(), consumer_threads, batch,
              guarded ? "through idem::consume" : "UNGUARDED");
  drain(broker, batch, tally, [&](const std::vector<Message>& polled) {
    return backend.transaction([&](auto& tx, auto insert_order) {
      std::vector<bool> commits;
      if (!guarded) {
        for (const Message& m : polled) {
          insert_order(m.order_no);
          tally.created++;
          commits.push_back(true);
        }
        return commits;
      }
      std::vector<idem::ClaimRequest> requests;
      for (const Message& m : polled)
        requests.push_back({idem::Key{"order.create", order_id(m.order_no)}, ""});
      const auto acks = idem::consume_batch(
          tx, requests, [&](std::size_t i) { insert_order(polled[i].order_no); });
      for (const idem::Ack& ack : acks) {
        // commit, or dead_letter: off the queue either way (a real consumer publishes a dead
        // letter to its dead-letter queue first); retry_later comes back.
        commits.push_back(ack != idem::Ack::retry_later);
        if (ack.verdict == idem::Verdict::acquired) tally.created++;
        if (ack.verdict == idem::Verdict::replayed) tally.replayed++;
        if (ack == idem::Ack::retry_later) tally.retried++;
      }
      return commits;
    });
  });

  const auto [rows, distinct] = backend.rows();
  const auto deliveries = broker.deliveries();
  std::printf("deliveries: %llu (%llu redelivered)\n", static_cast<unsigned long long>(deliveries),
              static_cast<unsigned long long>(deliveries - messages));
  if (guarded) {
    std::printf("created: %d, replayed without running: %d, retried later: %d, errors: %d\n",
                tally.created.load(), tally.replayed.load(), tally.retried.load(),
                tally.errors.load());
  }
  std::printf("order rows: %ld for %ld orders (%ld duplicates)\n", rows, distinct, rows - distinct);
  if (!guarded) return 0;
  const bool ok = rows == messages && distinct == messages && tally.errors == 0;
  std::printf("%s\n", ok ? "OK: every order was created exactly once"
                         : "FAILED: orders are missing or duplicated");
  return ok ? 0 : 1;
}

void usage() {
  std::printf(
      "usage: idem_mq_consumer [--db PATH | --mysql-socket PATH] [--batch N] [--unguarded]\n"
      "  --db PATH            SQLite file for the records and the orders (default idem-mq.db)\n"
      "  --mysql-socket PATH  run on MySQL / MariaDB through this unix socket, as root, in\n"
      "                       database idem_demo\n"
      "  --batch N            poll N messages at a time and consume them with one batch claim\n"
      "                       and one transaction (default 1)\n"
      "  --unguarded          insert an order per delivery, without idem: the incident\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string db = "idem-mq.db";
  std::string socket;
  std::size_t batch = 1;
  bool guarded = true;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--db" && i + 1 < argc) {
      db = argv[++i];
    } else if (arg == "--mysql-socket" && i + 1 < argc) {
      socket = argv[++i];
    } else if (arg == "--batch" && i + 1 < argc) {
      const long n = std::atol(argv[++i]);
      if (n < 1 || n > 10000) {
        std::fprintf(stderr, "idem_mq_consumer: --batch takes 1-10000\n");
        return 2;
      }
      batch = static_cast<std::size_t>(n);
    } else if (arg == "--unguarded") {
      guarded = false;
    } else if (arg == "-h" || arg == "--help") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "idem_mq_consumer: unknown argument %s\n", argv[i]);
      usage();
      return 2;
    }
  }
  try {
    if (!socket.empty()) {
#ifdef IDEM_DEMO_WITH_MYSQL
      idem::mysql::ConnectionParams params;
      params.unix_socket = socket;
      params.user = "root";
      idem::mysql::Connection{params}.query("CREATE DATABASE IF NOT EXISTS idem_demo");
      params.database = "idem_demo";
      auto pool = std::make_shared<idem::mysql::Pool>(params, idem::mysql::PoolParams{.size = 8});
      idem::mysql::Store store{pool};
      store.ensure_schema();
      MysqlBackend backend{store, *pool};
      return run(backend, "MySQL via " + socket, batch, guarded);
#else
      std::fprintf(stderr, "idem_mq_consumer: built without MySQL support\n");
      return 2;
#endif
    }
    idem::sqlite::Store store{std::filesystem::path(db)};
    SqliteBackend backend{store};
    return run(backend, "SQLite file " + db, batch, guarded);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_mq_consumer: %s\n", e.what());
    return 1;
  }
}
