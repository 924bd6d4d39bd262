// idem: the operator's program for idem's record tables (docs/operations.md). It reads and
// repairs records through the store's own operations: a repair applies only with the fence the
// operator saw, and keeps the reason with the record.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <idem/errors.hpp>
#include <idem/key.hpp>
#include <idem/record_query.hpp>
#include <idem/record_stats.hpp>
#include <idem/repair.hpp>

#include "mysql_target.hpp"
#include "record_text.hpp"
#ifdef IDEM_ADMIN_PG
#include "pg_target.hpp"
#endif
#include "redis_target.hpp"
#include "sqlite_target.hpp"
#include "target.hpp"

namespace {

// Exit codes: a script tells the outcomes apart without reading the text.
enum Exit : int {
  done = 0,
  not_found = 1,     // inspect: no record for the key
  usage = 2,         // bad command line; nothing was done
  refused = 3,       // the record moved on since the fence was read: read it again
  store_failed = 4,  // cannot connect, the server failed, a corrupt record
  mismatch = 5,      // the table is not as idem expects (schema check, or any command)
};

constexpr std::string_view help = R"(usage: idem [WHERE] COMMAND [ARGS]

Reads and repairs idem's idempotency records (docs/operations.md).

WHERE (one store; flags win over the environment):
  --sqlite FILE              a SQLite file (it must exist)
  --mysql-socket PATH        MySQL / MariaDB over a unix socket     (env IDEM_MYSQL_SOCKET)
  --mysql-host HOST          ... or over TCP                        (env IDEM_MYSQL_HOST)
  --mysql-port N             default 3306                           (env IDEM_MYSQL_PORT)
  --mysql-user USER          default root                           (env IDEM_MYSQL_USER)
  --mysql-database DB                                               (env IDEM_MYSQL_DATABASE)
                             the password only from env IDEM_MYSQL_PASSWORD or the option
                             file (never a flag: a flag shows in the process list)
  --mysql-option-file FILE   a my.cnf-style file read as the mysql client reads ~/.my.cnf:
                             its host, port, socket, user, password and database apply
                             where no flag or variable gives one (env IDEM_MYSQL_OPTION_FILE)
  --mysql-option-group NAME  the file's group to read, default client
  --redis-socket PATH        Redis over a unix socket                (env IDEM_REDIS_SOCKET)
  --redis-host HOST          ... or over TCP                         (env IDEM_REDIS_HOST)
  --redis-port N             default 6379                            (env IDEM_REDIS_PORT)
  --redis-cluster NODES      a cluster: some of its nodes, host:port,host:port,...
                                                                     (env IDEM_REDIS_CLUSTER)
  --redis-user USER          an ACL user; the password only from env IDEM_REDIS_PASSWORD
  --redis-prefix P           the services' StoreParams::prefix, default idem
  --redis-buckets N          the services' StoreParams::buckets, default 1024: together
                             they decide where a key's record lies
  --pg CONNINFO              PostgreSQL, by a libpq connection string or URI, e.g.
                             "host=/run/postgresql dbname=pay user=ops"  (env IDEM_PG_CONNINFO);
                             a password from libpq's PGPASSWORD or ~/.pgpass, never a flag
  --table NAME               the record table, default idempotent_record

COMMANDS:
  inspect BIZ_TYPE ID [--json]
      every field of one record; times in UTC and relative to now; on Redis also the
      record's key, bucket, cluster slot and the node that serves it
  list [--stale | --status STATUS | --unknown] [--biz-type T] [--older-than AGE]
       [--limit N] [--json]
      records by status (processing, succeeded, failed, outcome_unknown), claims whose
      lease ran out (--stale), outcome_unknown ones (--unknown), least recently updated
      first; AGE as 90s, 15m, 2h, 3d; --limit 1 to 10000, default 100
  release  BIZ_TYPE ID --fence N --reason TEXT
      failed, retryable: the next duplicate runs the business again
  complete BIZ_TYPE ID --fence N --reason TEXT --response JSON
      succeeded with JSON as the response duplicates replay
  fail     BIZ_TYPE ID --fence N --reason TEXT [--error JSON] [--retryable]
      failed with JSON as the error duplicates replay (or run again if --retryable)
      Each repair applies only while the record carries the fence you read (inspect);
      the reason is kept with the record.
  purge [--batch N] [--max-batches N] [--dry-run]
      deletes expired records, N at a time (default 1000, at most 100 batches);
      --dry-run counts what it would delete and deletes nothing
  stats [--json]
      records by biz_type and status, the purge backlog, stale claims and the oldest
      one's lease, the table's size (reads the whole table: not for every minute)
  schema check | print | migrate
      check the table; print the CREATE TABLE of this idem; bring a table an older idem
      created to this idem's layout (online). Redis: check and migrate read and write
      the buckets' layout stamps (migrate once no service runs an idem of layout 1)

EXIT STATUS:
  0 done   1 no such record   2 usage   3 refused: the record moved on, read it again
  4 store failure   5 the table is not as idem expects
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The command line after the program's name: flags with values, switches, positionals.
class Args {
 public:
  Args(int argc, char** argv, const std::set<std::string, std::less<>>& switches) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (switches.count(a) != 0) {
        flags_[a] = "";
      } else if (a.rfind("--", 0) != 0 || a == "--") {
        positional_.push_back(a);
      } else if (i + 1 < argc) {
        flags_[a] = argv[++i];
      } else {
        throw UsageError(fmt::format("{} needs a value", a));
      }
    }
  }
  std::optional<std::string> take(std::string_view flag) {
    auto it = flags_.find(flag);
    if (it == flags_.end()) return std::nullopt;
    std::string v = std::move(it->second);
    flags_.erase(it);
    return v;
  }
  bool take_switch(std::string_view flag) { return take(flag).has_value(); }
  std::string take_required(std::string_view flag) {
    auto v = take(flag);
    if (!v) throw UsageError(fmt::format("{} is required", flag));
    return *v;
  }
  std::uint64_t take_number(std::string_view flag, std::uint64_t otherwise) {
    const auto v = take(flag);
    if (!v) return otherwise;
    return number(*v, flag);
  }
  std::string next(std::string_view what) {
    if (position_ >= positional_.size()) throw UsageError(fmt::format("{} is missing", what));
    return positional_[position_++];
  }
  // Everything was used: a leftover is a typo the operator must see.
  void finished() const {
    if (!flags_.empty()) throw UsageError(fmt::format("unknown option {}", flags_.begin()->first));
    if (position_ < positional_.size()) {
      throw UsageError(fmt::format("unexpected argument {}", positional_[position_]));
    }
  }
  static std::uint64_t number(const std::string& text, std::string_view what) {
    std::size_t used = 0;
    unsigned long long n = 0;
    try {
      n = std::stoull(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() || text[0] == '-') {
      throw UsageError(fmt::format("{} must be a number, got \"{}\"", what, text));
    }
    return n;
  }

 private:
  std::map<std::string, std::string, std::less<>> flags_;
  std::vector<std::string> positional_;
  std::size_t position_ = 0;
};

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// The options that name a store, taken off the command line.
struct StoreFlags {
  std::optional<std::string> table, sqlite;
  std::optional<std::string> mysql_socket, mysql_host, mysql_port, mysql_user, mysql_database,
      mysql_option_file, mysql_option_group;
  std::optional<std::string> redis_socket, redis_host, redis_port, redis_cluster, redis_user,
      redis_prefix, redis_buckets;
  std::optional<std::string> pg;

  explicit StoreFlags(Args& a)
      : table(a.take("--table")),
        sqlite(a.take("--sqlite")),
        mysql_socket(a.take("--mysql-socket")),
        mysql_host(a.take("--mysql-host")),
        mysql_port(a.take("--mysql-port")),
        mysql_user(a.take("--mysql-user")),
        mysql_database(a.take("--mysql-database")),
        mysql_option_file(a.take("--mysql-option-file")),
        mysql_option_group(a.take("--mysql-option-group")),
        redis_socket(a.take("--redis-socket")),
        redis_host(a.take("--redis-host")),
        redis_port(a.take("--redis-port")),
        redis_cluster(a.take("--redis-cluster")),
        redis_user(a.take("--redis-user")),
        redis_prefix(a.take("--redis-prefix")),
        redis_buckets(a.take("--redis-buckets")),
        pg(a.take("--pg")) {}

  bool mysql() const {
    return mysql_socket || mysql_host || mysql_port || mysql_user || mysql_database ||
           mysql_option_file || mysql_option_group;
  }
  bool redis() const {
    return redis_socket || redis_host || redis_port || redis_cluster || redis_user ||
           redis_prefix || redis_buckets;
  }
  std::string table_name() const { return table.value_or("idempotent_record"); }
};

std::unique_ptr<idem_admin::Target> mysql_target(StoreFlags& f) {
  auto& socket = f.mysql_socket;
  auto& host = f.mysql_host;
  auto& port = f.mysql_port;
  auto& user = f.mysql_user;
  auto& database = f.mysql_database;
  auto& option_file = f.mysql_option_file;
  if (!socket && !host) {
    socket = env("IDEM_MYSQL_SOCKET");
    host = env("IDEM_MYSQL_HOST");
  }
  if (!option_file) option_file = env("IDEM_MYSQL_OPTION_FILE");
  if (f.mysql_option_group && !option_file) {
    throw UsageError("--mysql-option-group needs --mysql-option-file");
  }
  if (!socket && !host && !option_file) {
    throw UsageError(
        "MySQL: give --mysql-socket PATH, --mysql-host HOST or --mysql-option-file FILE");
  }
  idem::mysql::ConnectionParams c;
  if (option_file) {
    // What no flag or variable gives comes from the file.
    if (!std::ifstream(*option_file)) {
      throw UsageError(fmt::format("cannot read the option file {}", *option_file));
    }
    c.option_file = *option_file;
    if (f.mysql_option_group) c.option_group = *f.mysql_option_group;
    c.host.clear();
    c.user.clear();
    c.port = 0;
  }
  if (socket) c.unix_socket = *socket;
  if (host) c.host = *host;
  if (!port) port = env("IDEM_MYSQL_PORT");
  if (port) c.port = static_cast<unsigned>(Args::number(*port, "--mysql-port"));
  if (!user) user = env("IDEM_MYSQL_USER");
  if (user) c.user = *user;
  if (!database) database = env("IDEM_MYSQL_DATABASE");
  if (!database && !option_file) {
    throw UsageError("--mysql-database (or IDEM_MYSQL_DATABASE, or an option file) is required");
  }
  c.database = database.value_or("");
  c.password = env("IDEM_MYSQL_PASSWORD").value_or("");
  return std::make_unique<idem_admin::MysqlTarget>(c, f.table_name());
}

std::unique_ptr<idem_admin::Target> redis_target(StoreFlags& f) {
  if (f.table) throw UsageError("--table is not for Redis: its records lie by --redis-prefix");
  auto& socket = f.redis_socket;
  auto& host = f.redis_host;
  auto& cluster = f.redis_cluster;
  if (!socket && !host && !cluster) {
    socket = env("IDEM_REDIS_SOCKET");
    host = env("IDEM_REDIS_HOST");
    cluster = env("IDEM_REDIS_CLUSTER");
  }
  const int where = static_cast<int>(socket.has_value()) + static_cast<int>(host.has_value()) +
                    static_cast<int>(cluster.has_value());
  if (where != 1) {
    throw UsageError(
        "Redis: give one of --redis-socket PATH, --redis-host HOST and --redis-cluster NODES "
        "(or one of their variables)");
  }
  idem::redis::ConnectionParams c;
  if (socket) c.unix_socket = *socket;
  if (host) c.host = *host;
  auto& port = f.redis_port;
  if (!port) port = env("IDEM_REDIS_PORT");
  if (port) c.port = static_cast<unsigned>(Args::number(*port, "--redis-port"));
  if (cluster) {
    for (std::size_t from = 0; from <= cluster->size();) {
      const std::size_t comma = std::min(cluster->find(',', from), cluster->size());
      if (comma > from) c.cluster_nodes.push_back(cluster->substr(from, comma - from));
      from = comma + 1;
    }
    if (c.cluster_nodes.empty()) throw UsageError("--redis-cluster names no node");
  }
  if (f.redis_user) c.user = *f.redis_user;
  c.password = env("IDEM_REDIS_PASSWORD").value_or("");
  c.client_name = "idem-admin";
  idem::redis::StoreParams p;
  if (f.redis_prefix) p.prefix = *f.redis_prefix;
  if (f.redis_buckets) {
    p.buckets = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(Args::number(*f.redis_buckets, "--redis-buckets"), 1u << 30));
  }
  return std::make_unique<idem_admin::RedisTarget>(c, std::move(p));
}

std::unique_ptr<idem_admin::Target> pg_target(const StoreFlags& f, const std::string& conninfo) {
#ifdef IDEM_ADMIN_PG
  return std::make_unique<idem_admin::PgTarget>(
      idem::pg::ConnectionParams{.conninfo = conninfo, .application_name = "idem-admin"},
      f.table_name());
#else
  (void)f;
  (void)conninfo;
  throw UsageError("this idem was built without PostgreSQL (libpq)");
#endif
}

// The store a command works on: the one its options name (--sqlite, --mysql-..., --redis-...
// or --pg), or else the one the environment names (IDEM_MYSQL_..., IDEM_REDIS_... or
// IDEM_PG_CONNINFO).
std::unique_ptr<idem_admin::Target> open_target(Args& args) {
  StoreFlags f(args);
  const int named = static_cast<int>(f.sqlite.has_value()) + static_cast<int>(f.mysql()) +
                    static_cast<int>(f.redis()) + static_cast<int>(f.pg.has_value());
  if (named > 1) {
    throw UsageError("give the options of one store: --sqlite, --mysql-..., --redis-... or --pg");
  }
  if (f.sqlite) return std::make_unique<idem_admin::SqliteTarget>(*f.sqlite, f.table_name());
  if (f.mysql()) return mysql_target(f);
  if (f.redis()) return redis_target(f);
  if (f.pg) return pg_target(f, *f.pg);
  const bool mysql_env =
      env("IDEM_MYSQL_SOCKET") || env("IDEM_MYSQL_HOST") || env("IDEM_MYSQL_OPTION_FILE");
  const bool redis_env =
      env("IDEM_REDIS_SOCKET") || env("IDEM_REDIS_HOST") || env("IDEM_REDIS_CLUSTER");
  const auto pg_env = env("IDEM_PG_CONNINFO");
  if (static_cast<int>(mysql_env) + static_cast<int>(redis_env) +
          static_cast<int>(pg_env.has_value()) >
      1) {
    throw UsageError(
        "more than one of IDEM_MYSQL_..., IDEM_REDIS_... and IDEM_PG_CONNINFO name a store: "
        "choose one with its options");
  }
  if (mysql_env) return mysql_target(f);
  if (redis_env) return redis_target(f);
  if (pg_env) return pg_target(f, *pg_env);
  throw UsageError(
      "no store: give --sqlite FILE, --mysql-socket PATH, --mysql-host HOST, "
      "--mysql-option-file FILE, --redis-socket PATH, --redis-host HOST, --redis-cluster NODES "
      "or --pg CONNINFO");
}

idem::Key key_from(Args& args) {
  const std::string biz_type = args.next("BIZ_TYPE");
  const std::string id = args.next("ID");
  try {
    return idem::Key{biz_type, id};
  } catch (const idem::InvalidArgument& e) {
    throw UsageError(e.what());
  }
}

idem::Duration age(const std::string& text) {
  const auto unit = text.find_first_not_of("0123456789");
  if (unit == 0 || unit == std::string::npos) {
    throw UsageError(
        fmt::format("--older-than takes a number and a unit (s, m, h, d), got \"{}\"", text));
  }
  const auto n = static_cast<long long>(Args::number(text.substr(0, unit), "--older-than"));
  const std::string u = text.substr(unit);
  using namespace std::chrono;
  if (u == "s") return duration_cast<idem::Duration>(seconds{n});
  if (u == "m") return duration_cast<idem::Duration>(minutes{n});
  if (u == "h") return duration_cast<idem::Duration>(hours{n});
  if (u == "d") return duration_cast<idem::Duration>(days{n});
  throw UsageError(fmt::format("--older-than's unit is s, m, h or d, got \"{}\"", u));
}

std::string valid_json(const std::string& text, std::string_view flag) {
  if (!nlohmann::json::accept(text)) {
    throw UsageError(fmt::format("{} must be JSON, got {}", flag, text));
  }
  return text;
}

idem::TimePoint now() {
  return idem::system_now();
}

int inspect(idem_admin::Target& t, Args& args) {
  const idem::Key key = key_from(args);
  const bool as_json = args.take_switch("--json");
  args.finished();
  const auto r = t.find(key);
  if (!r) {
    std::fprintf(stderr, "idem: no record for %s/%s in %s\n", key.biz_type().c_str(),
                 key.id().c_str(), t.describe().c_str());
    return not_found;
  }
  const auto location = t.locate(key);
  if (as_json) {
    nlohmann::json j = idem_admin::json(*r);
    for (const auto& [name, value] : location)
      j["location"][name] = value;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << idem_admin::text(*r, now());
    for (const auto& [name, value] : location)
      std::cout << fmt::format("{:<16}{}\n", name, value);
  }
  return done;
}

int list(idem_admin::Target& t, Args& args) {
  idem::RecordQuery q;
  q.stale = args.take_switch("--stale");
  if (args.take_switch("--unknown")) q.status = idem::Status::outcome_unknown;
  if (const auto s = args.take("--status")) {
    if (q.status) throw UsageError("--unknown and --status exclude each other");
    static const std::map<std::string, idem::Status, std::less<>> names{
        {"processing", idem::Status::processing},
        {"succeeded", idem::Status::succeeded},
        {"failed", idem::Status::failed},
        {"outcome_unknown", idem::Status::outcome_unknown}};
    const auto it = names.find(*s);
    if (it == names.end()) {
      throw UsageError(fmt::format(
          "--status is processing, succeeded, failed or outcome_unknown, got \"{}\"", *s));
    }
    q.status = it->second;
  }
  q.biz_type = args.take("--biz-type").value_or("");
  if (const auto a = args.take("--older-than")) q.not_updated_for = age(*a);
  q.limit = args.take_number("--limit", 100);
  const bool as_json = args.take_switch("--json");
  args.finished();
  try {
    idem::validate(q);
  } catch (const idem::InvalidArgument& e) {
    throw UsageError(e.what());
  }
  const auto records = t.list(q);
  if (as_json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& r : records)
      all.push_back(idem_admin::json(r));
    std::cout << all.dump(2) << "\n";
  } else {
    const auto at = now();
    for (const auto& r : records)
      std::cout << idem_admin::row(r, at);
    std::fprintf(stderr, "%zu record(s)%s\n", records.size(),
                 records.size() == q.limit ? " (the limit: there may be more)" : "");
  }
  return done;
}

int repair(idem_admin::Target& t, Args& args, idem::RepairAction action) {
  const idem::Key key = key_from(args);
  idem::Repair r;
  r.action = action;
  r.fence = args.take_number("--fence", 0);
  if (r.fence == 0) throw UsageError("--fence is required: the fence you read with inspect");
  r.reason = args.take_required("--reason");
  if (action == idem::RepairAction::complete) {
    r.snapshot = valid_json(args.take_required("--response"), "--response");
  } else if (action == idem::RepairAction::fail) {
    if (const auto e = args.take("--error")) r.snapshot = valid_json(*e, "--error");
    r.retryable = args.take_switch("--retryable");
  }
  args.finished();
  try {
    const idem::Record written = t.repair(key, r);
    std::fprintf(stderr, "idem: %s/%s: %s, now fence %llu\n", key.biz_type().c_str(),
                 key.id().c_str(), std::string(idem::to_string(action)).c_str(),
                 static_cast<unsigned long long>(written.ticket.fence));
    std::cout << idem_admin::text(written, now());
    return done;
  } catch (const idem::InvalidArgument& e) {
    throw UsageError(e.what());
  } catch (const idem::RepairRefused& e) {
    std::fprintf(stderr, "idem: refused, nothing written: %s\n", e.what());
    if (e.current()) std::cerr << "the record now:\n" << idem_admin::text(*e.current(), now());
    return refused;
  }
}

int purge(idem_admin::Target& t, Args& args) {
  const auto batch = args.take_number("--batch", 1000);
  const auto batches = args.take_number("--max-batches", 100);
  const bool dry_run = args.take_switch("--dry-run");
  args.finished();
  if (batch == 0 || batches == 0) throw UsageError("--batch and --max-batches must be at least 1");
  if (dry_run) {
    const std::uint64_t backlog = t.stats().purge_backlog;
    const std::uint64_t limit =
        batch > UINT64_MAX / batches ? UINT64_MAX : batch * batches;  // as purge saturates
    std::printf("would purge %llu expired record(s)%s; nothing was deleted\n",
                static_cast<unsigned long long>(std::min(backlog, limit)),
                backlog > limit
                    ? fmt::format(" of {} (the limit: it would take more runs)", backlog).c_str()
                    : "");
    return done;
  }
  const std::size_t n = t.purge(batch, batches);
  std::printf("purged %zu expired record(s)%s\n", n,
              n == batch * batches ? " (the limit: run it again for more)" : "");
  return done;
}

int stats(idem_admin::Target& t, Args& args) {
  const bool as_json = args.take_switch("--json");
  args.finished();
  const idem::RecordStats s = t.stats();
  std::cout << (as_json ? idem_admin::json(s).dump(2) + "\n" : idem_admin::text(s));
  return done;
}

int schema(idem_admin::Target& t, Args& args) {
  const std::string what = args.next("check, print or migrate");
  args.finished();
  if (what == "print") {
    std::cout << t.ddl() << ";\n";
  } else if (what == "check") {
    const idem::TableLayout layout = t.check_schema();
    std::printf("%s: as this idem expects; %s\n", t.describe().c_str(),
                idem_admin::text(layout).c_str());
  } else if (what == "migrate") {
    std::printf("%s\n", t.migrate().c_str());
  } else {
    throw UsageError(fmt::format("schema takes check, print or migrate, not \"{}\"", what));
  }
  return done;
}

int run(int argc, char** argv) {
  Args args(argc, argv,
            {"--json", "--stale", "--unknown", "--retryable", "--dry-run", "--help", "-h"});
  if (args.take_switch("--help") || args.take_switch("-h") || argc == 1) {
    std::cout << help;
    return argc == 1 ? usage : done;
  }
  const std::string command = args.next("COMMAND");
  if (command == "help") {
    std::cout << help;
    return done;
  }
  static const std::set<std::string, std::less<>> commands{
      "inspect", "list", "release", "complete", "fail", "purge", "stats", "schema"};
  if (commands.count(command) == 0) {
    throw UsageError(fmt::format("unknown command \"{}\" (idem --help lists them)", command));
  }
  std::unique_ptr<idem_admin::Target> t = open_target(args);
  if (command == "inspect") return inspect(*t, args);
  if (command == "list") return list(*t, args);
  if (command == "release") return repair(*t, args, idem::RepairAction::release);
  if (command == "complete") return repair(*t, args, idem::RepairAction::complete);
  if (command == "fail") return repair(*t, args, idem::RepairAction::fail);
  if (command == "purge") return purge(*t, args);
  if (command == "stats") return stats(*t, args);
  return schema(*t, args);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "idem: %s\n", e.what());
    return usage;
  } catch (const idem_admin::Unsupported& e) {
    std::fprintf(stderr, "idem: %s\n", e.what());
    return usage;
  } catch (const idem::InvalidArgument& e) {  // e.g. a --table name idem would not accept
    std::fprintf(stderr, "idem: %s\n", e.what());
    return usage;
  } catch (const idem::SchemaMismatch& e) {
    std::fprintf(stderr, "idem: the table is not as idem expects: %s\n", e.what());
    return mismatch;
  } catch (const idem::StoreError& e) {
    std::fprintf(stderr, "idem: store failure: %s\n", e.what());
    return store_failed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem: %s\n", e.what());
    return store_failed;
  }
}
