// idem-bench: idem against the raw database in the same run. See docs/performance.md.
//
//   idem-bench [--quick] [--only name[,name...]] [--socket PATH] [--database NAME]
//              [--user NAME] [--password PW] [--work-dir DIR] [--rounds N] [--threads N]
//              [--big-rows N] [--galera-sockets A,B,C] [--redis-socket PATH] [--amqp HOST:PORT]
//              [--pg-socket DIR] [--list]
//
// Prints one JSON object per scenario per line on stdout; progress on stderr. Exits 0 when
// every selected scenario ran (whatever its figures), 1 when one could not run, 2 on bad
// arguments.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"
#include "scenarios.hpp"

namespace {

[[noreturn]] void usage(int code) {
  std::fprintf(
      code == 0 ? stdout : stderr,
      "usage: idem-bench [--quick] [--only name[,name...]] [--socket PATH] "
      "[--database NAME]\n"
      "                  [--user NAME] [--password PW] [--work-dir DIR] [--rounds N] "
      "[--threads N] [--big-rows N] [--purge-batch N] [--purge-pause MS] [--read-back] [--list]\n"
      "  --quick      fewer operations and rounds (under 2 minutes on 2 cores)\n"
      "  --only       run only these scenarios (see --list); a prefix such as mysql. "
      "selects a group\n"
      "  --socket     MariaDB/MySQL unix socket for the mysql.* scenarios\n"
      "  --database   database for the benchmark tables (default idem_test)\n"
      "  --work-dir   directory for the SQLite file (default .)\n"
      "  --rounds     rounds per side (default 5, --quick 3)\n"
      "  --threads    connections of the 32-connection mysql scenarios (default 32)\n"
      "  --purge-batch rows per DELETE in mysql.big_table (default 1000, as the Janitor)\n"
      "  --big-rows   expired rows of mysql.big_table (default 1,000,000, --quick "
      "100,000)\n"
      "  --purge-pause pause in ms between the DELETEs of mysql.big_table (a paced\n"
      "               Janitor, JanitorParams::purge_pause; default 0)\n"
      "  --read-back  the library's MySQL claims read the new row back instead of\n"
      "               INSERT ... RETURNING (StoreParams::insert_returning = false)\n"
      "  --galera-sockets  unix sockets of the Galera nodes for galera.cycle\n"
      "  --redis-socket  Redis unix socket for the redis.* scenarios\n"
      "  --pg-socket  PostgreSQL socket directory for the pg.* scenarios (user and database idem)\n"
      "  --amqp          RabbitMQ HOST:PORT for amqp.consume\n");
  std::exit(code);
}

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    const auto part = s.substr(0, comma);
    if (!part.empty()) out.emplace_back(part);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

long to_number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1) {
    std::fprintf(stderr, "idem-bench: %s needs a positive number, got \"%s\"\n", flag.c_str(),
                 text.c_str());
    usage(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config config;
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "idem-bench: %s needs a value\n", a.c_str());
        usage(2);
      }
      return args[++i];
    };
    if (a == "--quick") {
      config.quick = true;
    } else if (a == "--only") {
      config.only = split(value());
    } else if (a == "--socket") {
      config.socket = value();
    } else if (a == "--database") {
      config.database = value();
    } else if (a == "--user") {
      config.user = value();
    } else if (a == "--password") {
      config.password = value();
    } else if (a == "--work-dir") {
      config.work_dir = value();
    } else if (a == "--rounds") {
      config.rounds = static_cast<int>(to_number(a, value()));
    } else if (a == "--threads") {
      config.threads = static_cast<int>(to_number(a, value()));
    } else if (a == "--purge-batch") {
      config.purge_batch = static_cast<std::size_t>(to_number(a, value()));
    } else if (a == "--big-rows") {
      config.big_rows = to_number(a, value());
    } else if (a == "--purge-pause") {
      config.purge_pause_ms = to_number(a, value());
    } else if (a == "--read-back") {
      config.read_back = true;
    } else if (a == "--redis-socket") {
      config.redis_socket = value();
    } else if (a == "--amqp") {
      config.amqp = value();
    } else if (a == "--pg-socket") {
      config.pg_socket = value();
    } else if (a == "--galera-sockets") {
      config.galera_sockets = split(value());
    } else if (a == "--list") {
      for (const auto& n : bench::scenario_names())
        std::printf("%s\n", n.c_str());
      return 0;
    } else if (a == "-h" || a == "--help") {
      usage(0);
    } else {
      std::fprintf(stderr, "idem-bench: unknown argument: %s\n", a.c_str());
      usage(2);
    }
  }
  // A name selects itself; a name ending in '.' selects its group.
  auto matches = [](const std::string& pattern, const std::string& name) {
    return pattern == name ||
           (!pattern.empty() && pattern.back() == '.' && name.rfind(pattern, 0) == 0);
  };
  for (const auto& p : config.only) {
    bool known = false;
    for (const auto& n : bench::scenario_names())
      known = known || matches(p, n);
    if (!known) {
      std::fprintf(stderr, "idem-bench: no scenario \"%s\" (see --list)\n", p.c_str());
      return 2;
    }
  }
  const bench::Selected selected = [&](const std::string& name) {
    if (config.only.empty()) return true;
    for (const auto& p : config.only)
      if (matches(p, name)) return true;
    return false;
  };

  const auto t0 = bench::Clock::now();
  bench::progress(bench::fmt_load());
  int failed = 0;
  failed += bench::run_memory(config, selected);
  failed += bench::run_mysql(config, selected);
  failed += bench::run_sqlite(config, selected);
  failed += bench::run_redis(config, selected);
  failed += bench::run_redis_async(config, selected);
  failed += bench::run_galera(config, selected);
  failed += bench::run_footprint(config, selected);
  failed += bench::run_amqp(config, selected);
  failed += bench::run_pg(config, selected);
  bench::progress(fmt::format("done in {:.1f} s; {}", bench::seconds_since(t0), bench::fmt_load()));
  return failed == 0 ? 0 : 1;
}
