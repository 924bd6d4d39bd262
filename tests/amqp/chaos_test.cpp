// Consumer processes (examples/amqp_consumer.cpp) on a real broker and the suite's own MariaDB,
// while they are SIGKILLed, the broker closes their connections and the database restarts:
// each payment is credited exactly once, and no valid payment is dead-lettered.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <idem/amqp.hpp>
#include <idem/mysql.hpp>

#include "../sqlite/child_process.hpp"
#include "../support/fault_server.hpp"
#include "../support/rabbitmq_broker.hpp"
#include "../support/temp_dir.hpp"

using namespace std::chrono_literals;

namespace {

// One consumer process: the example program, its output in `log`.
pid_t start_consumer(const std::vector<std::string>& args, const std::string& log) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Dies with the test, however the test ends (an abort runs no destructor).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // the test died before prctl
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// The chaos fixture's own MariaDB server.
idem::mysql::ConnectionParams chaos_server() {
  idem::mysql::ConnectionParams p;
  p.unix_socket = std::string(idem_test::paths::fault_mariadb_dir) + "/mysqld.sock";
  p.user = "root";
  return p;
}

// A count on that server, on a connection of its own: the server restarts under us.
long long count_on(const std::string& database, const std::string& sql) {
  idem::mysql::ConnectionParams p = chaos_server();
  p.database = database;
  idem::mysql::Connection c(p);
  return c.select(sql, {}).at(0).at(0).integer().value();
}

// The last lines of each consumer's output, for a failure's report.
std::string consumer_logs(const idem_test::TempDir& logs, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    std::ifstream in(logs / ("consumer-" + std::to_string(i) + ".log"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);)
      lines.push_back(line);
    out += "--- consumer " + std::to_string(i) + "\n";
    for (std::size_t j = lines.size() > 8 ? lines.size() - 8 : 0; j < lines.size(); ++j)
      out += lines[j] + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("consumer processes killed, connections closed, database restarted: each payment once") {
  constexpr int payments = 12000;
  constexpr int duplicates = 1440;  // 12%
  constexpr int consumers = 3;
  constexpr int kills = 7;
  const std::string database = "idem_amqp_chaos_" + std::to_string(::getpid());
  // A quorum queue with a delivery limit, as the user ran: immediate requeues during a
  // database restart would dead-letter valid payments there.
  idem_test::WorkQueue queue({.quorum = true, .delivery_limit = 20});
  idem_test::TempDir logs;
  // Every payment, and after every 8th a copy of one published just before (12%).
  std::vector<int> trades;
  for (int i = 0; i < payments; ++i) {
    trades.push_back(i);
    if (i % 8 == 7 && static_cast<int>(trades.size()) - i - 1 < duplicates) trades.push_back(i - 3);
  }
  // The producer publishes at about 2,000 messages a second all through the chaos, so that
  // the chaos lands under load however fast the consumers drain.
  std::atomic<bool> published{false};
  std::thread producer_thread([&] {
    // With publisher confirms: the broker closes this connection too, and a message counts as
    // published once confirmed (one published again after a close is one duplicate more).
    std::optional<idem::amqp::Channel> producer;
    for (std::size_t i = 0; i < trades.size();) {
      try {
        if (!producer) {
          producer.emplace(idem_test::broker());
          producer->confirm_publishes();
        }
        const int n = trades[i];
        producer->publish("", queue.name,
                          nlohmann::json{{"trade_no", "T" + std::to_string(n)},
                                         {"account", "A" + std::to_string(n % 13)},
                                         {"amount", 100 + n}}
                              .dump());
        if (i % 100 == 99) std::this_thread::sleep_for(40ms);
        ++i;
      } catch (const idem::amqp::BrokerError&) {
        producer.reset();
        std::this_thread::sleep_for(50ms);
      }
    }
    published = true;
  });
  std::vector<pid_t> pids;
  // Whatever happens, the producer is joined and no consumer outlives the test.
  const std::unique_ptr<void, std::function<void(void*)>> cleanup(&pids, [&](void*) {
    if (producer_thread.joinable()) producer_thread.join();
    for (pid_t pid : pids) {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) idem_test::wait_exit(pid);
    }
  });
  const auto broker = idem_test::broker();
  const std::vector<std::string> args = {idem_test::paths::amqp_consumer,
                                         "--amqp",
                                         broker.host + ":" + std::to_string(broker.port),
                                         "--queue",
                                         queue.name,
                                         "--mysql-socket",
                                         chaos_server().unix_socket,
                                         "--database",
                                         database,
                                         "--prefetch",
                                         "50"};
  int started = 0;
  auto start = [&] {
    return start_consumer(args,
                          (logs / ("consumer-" + std::to_string(started++) + ".log")).string());
  };
  for (int i = 0; i < consumers; ++i)
    pids.push_back(start());

  const auto credited = [&]() -> long long {
    try {
      return count_on(database, "SELECT COUNT(DISTINCT trade_no) FROM credits");
    } catch (const std::exception&) {
      return -1;  // not created yet, or the server is restarting
    }
  };
  std::mt19937 rng(20261205);
  int killed = 0, closes = 0;
  bool restarted = false;
  // The chaos, one event after another while the queue drains: 7 SIGKILLs (each consumer
  // started again at once), 2 closes of every connection by the broker, a database crash
  // and restart.
  enum Event { kill, close, restart };
  const std::vector<Event> chaos = {kill,    kill, close, kill, kill,
                                    restart, kill, close, kill, kill};
  REQUIRE(idem_test::eventually([&] { return credited() >= payments / 20; }, 120s));
  long long at_last_event = 0;
  for (const Event e : chaos) {
    switch (e) {
      case kill: {
        const std::size_t victim = rng() % pids.size();
        ::kill(pids[victim], SIGKILL);
        idem_test::wait_exit(pids[victim]);
        pids[victim] = start();
        ++killed;
        break;
      }
      case close:
        idem_test::broker_ctl("close_all_connections 'idem test: closed by the broker'");
        ++closes;
        break;
      case restart:
        REQUIRE(idem_fault::crash_server() > 0);
        std::this_thread::sleep_for(3s);
        REQUIRE(idem_fault::resume_server());
        restarted = true;
        break;
    }
    at_last_event = credited();
    std::this_thread::sleep_for(40ms);
  }
  const bool still_publishing = !published;
  producer_thread.join();
  long long done = 0;
  idem_test::eventually([&] { return (done = credited()) >= payments; }, 240s);
  // Everything settled on the broker: nothing ready, nothing left unacknowledged.
  const bool drained = idem_test::eventually([&] { return queue.ready() == 0; }, 30s);
  std::vector<int> exits;
  for (pid_t& pid : pids) {
    ::kill(pid, SIGTERM);
    exits.push_back(idem_test::wait_exit(pid));
    pid = -1;
  }
  INFO("the consumers' output:\n" << consumer_logs(logs, started));
  CHECK(exits == std::vector<int>(pids.size(), 0));
  CHECK(killed == kills);
  CHECK(closes == 2);
  CHECK(restarted);
  CHECK(still_publishing);  // the chaos landed under load
  CHECK(at_last_event < payments);
  CHECK(drained);
  CHECK(done == payments);
  CHECK(count_on(database, "SELECT COUNT(*) FROM credits") == payments);  // none twice
  CHECK(count_on(database, "SELECT COUNT(*) FROM idempotent_record WHERE status <> 1") == 0);
  CHECK(queue.dead_lettered() == 0);  // no valid payment dead-lettered, by us or by the broker
  idem::mysql::Connection(chaos_server()).query("DROP DATABASE IF EXISTS `" + database + "`");
}
