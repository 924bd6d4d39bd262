// Hostile input through the public API, the same table of cases on every backend (MemoryStore,
// idem::sqlite::Store, idem::mysql::Store). Each case either yields its documented typed error
// and leaves the table exactly as it was (a checksum over the whole table before and after:
// CHECKSUM TABLE on MariaDB, a SHA-256 over every row on SQLite and in memory), or is a valid
// value that is stored verbatim.
#include <mysql.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/fault_server.hpp"

using namespace std::chrono_literals;
using namespace std::string_literals;

namespace {

// What a case must end in.
enum class Expect {
  invalid_argument,  // idem::InvalidArgument, nothing changed
  lease_lost,        // idem::LeaseLost, nothing changed
  usage_error,       // idem::UsageError (not BadOutcomeAccess), nothing changed
  bad_access,        // idem::BadOutcomeAccess, nothing changed
  corrupt_record,    // idem::CorruptRecord, nothing changed
  unchanged,         // returns `detail`, nothing changed
  stored,            // returns `detail` (e.g. the key read back), one record added or updated
};

const char* name(Expect e) {
  switch (e) {
    case Expect::invalid_argument:
      return "InvalidArgument";
    case Expect::lease_lost:
      return "LeaseLost";
    case Expect::usage_error:
      return "UsageError";
    case Expect::bad_access:
      return "BadOutcomeAccess";
    case Expect::corrupt_record:
      return "CorruptRecord";
    case Expect::unchanged:
      return "unchanged";
    case Expect::stored:
      return "stored";
  }
  return "?";
}

std::string classify(const idem::Error& e) {
  if (dynamic_cast<const idem::CorruptRecord*>(&e)) return "CorruptRecord";
  if (dynamic_cast<const idem::StoreError*>(&e)) return "StoreError";
  if (dynamic_cast<const idem::BadOutcomeAccess*>(&e)) return "BadOutcomeAccess";
  if (dynamic_cast<const idem::UsageError*>(&e)) return "UsageError";
  if (dynamic_cast<const idem::InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const idem::LeaseLost*>(&e)) return "LeaseLost";
  return "Error";
}

// State a case's setup leaves for its act (an open claim, an open guard).
template <class S>
struct Context {
  idem::Ticket ticket;
  std::optional<idem::IdempotencyGuard<S>> guard;
};

template <class S>
struct Case {
  std::string name;
  std::function<void(S&, Context<S>&)> setup;  // runs before the "before" checksum; may be empty
  std::function<std::string(S&, Context<S>&)> act;
  Expect expect;
  std::string detail;  // a part of what() for errors; the exact result otherwise
};

const idem::Options plain{.lease = 30s, .ttl = 1h};

std::string text_of(const idem::Record& r) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", r.key.biz_type(), r.key.id(),
                     static_cast<int>(r.status), r.ticket.fence, r.ticket.owner, r.fingerprint,
                     r.snapshot, r.retryable, r.attempts, r.created_at.time_since_epoch().count(),
                     r.updated_at.time_since_epoch().count(),
                     r.lease_until.time_since_epoch().count(),
                     r.expire_at.time_since_epoch().count());
}

// Records every backend gets before the cases run: one in each state, plus the lower-case
// key the case and space variants must not touch.
template <class S>
std::vector<idem::Key> seed(S& store) {
  const idem::Key done{"PAY", "abc"}, failed{"PAY", "declined"}, open{"PAY", "open"},
      victim{"PAY", "victim"};
  store.complete(done, store.claim(done, "fp-abc", plain).record.ticket, R"({"receipt":"R-1"})");
  store.fail(failed, store.claim(failed, "", plain).record.ticket, R"({"error":"card_declined"})",
             false);
  store.claim(open, "", plain);
  store.complete(victim, store.claim(victim, "", plain).record.ticket, R"("paid")");
  return {done, failed, open, victim};
}

std::string too_long(std::size_t n, char c = 'a') {
  return std::string(n, c);
}

// The cases every backend runs (46).
template <class S>
std::vector<Case<S>> common_cases() {
  using C = Context<S>;
  auto claim_key = [](std::string biz, std::string id) {
    return [biz, id](S& s, C&) {
      s.claim(idem::Key{biz, id}, "", plain);
      return std::string("claimed");
    };
  };
  auto claim_opts = [](idem::Options o) {
    return [o](S& s, C&) {
      s.claim(idem::Key{"PAY", "fresh-options"}, "", o);
      return std::string("claimed");
    };
  };
  auto claim_fp = [](std::string fp) {
    return [fp](S& s, C&) {
      s.claim(idem::Key{"PAY", "fresh-fp"}, fp, plain);
      return std::string("claimed");
    };
  };
  // A valid id or biz_type: claimed as a new record and read back byte for byte.
  auto stored_key = [](std::string biz, std::string id) {
    return [biz, id](S& s, C&) {
      const auto c = s.claim(idem::Key{biz, id}, "", plain);
      const auto r = s.find(idem::Key{biz, id});
      if (c.verdict != idem::Verdict::acquired || !r) return std::string("not acquired");
      return r->key.biz_type() + "/" + r->key.id();
    };
  };
  auto open_claim = [](std::string id) {
    return [id](S& s, C& ctx) {
      ctx.ticket = s.claim(idem::Key{"PAY", id}, "", plain).record.ticket;
    };
  };
  auto open_guard = [](std::string id) {
    return [id](S& s, C& ctx) { ctx.guard.emplace(s, idem::Key{"PAY", id}, "", plain); };
  };
  const std::string big(idem::max_snapshot_bytes, 'x');  // as a JSON string: 2 bytes over
  std::string emoji64;  // 16 x U+1F600: the longest id, in 4-byte characters
  for (int i = 0; i < 16; ++i)
    emoji64 += "\xf0\x9f\x98\x80";
  const std::string at_limit = "\"" + std::string(idem::max_snapshot_bytes - 2, 'x') + "\"";

  std::vector<Case<S>> cases = {
      // Keys: every rule of idem::Key, through a claim.
      {"empty id", {}, claim_key("PAY", ""), Expect::invalid_argument, "id must be 1-64 bytes"},
      {"empty biz_type", {}, claim_key("", "k"), Expect::invalid_argument, "biz_type must be 1-32"},
      {"id of 65 bytes",
       {},
       claim_key("PAY", too_long(65)),
       Expect::invalid_argument,
       "got 65 bytes"},
      {"biz_type of 33 bytes",
       {},
       claim_key(too_long(33, 'B'), "k"),
       Expect::invalid_argument,
       "got 33 bytes"},
      {"id with an invalid UTF-8 byte",
       {},
       claim_key("PAY", "ab\xff"),
       Expect::invalid_argument,
       "valid UTF-8; byte 2"},
      {"id with an overlong UTF-8 form",
       {},
       claim_key("PAY", "\xc0\xaf"),
       Expect::invalid_argument,
       "valid UTF-8; byte 0"},
      {"id with a UTF-16 surrogate",
       {},
       claim_key("PAY", "x\xed\xa0\x80"),
       Expect::invalid_argument,
       "valid UTF-8; byte 1"},
      {"id with a truncated sequence",
       {},
       claim_key("PAY", "\xe5\x8d"),
       Expect::invalid_argument,
       "valid UTF-8"},
      {"id above U+10FFFF",
       {},
       claim_key("PAY", "\xf4\x90\x80\x80"),
       Expect::invalid_argument,
       "valid UTF-8"},
      {"id with a NUL byte",
       {},
       claim_key("PAY", "abc\0def"s),
       Expect::invalid_argument,
       "control characters; byte 3"},
      {"id with a newline",
       {},
       claim_key("PAY", "abc\n"),
       Expect::invalid_argument,
       "control characters; byte 3"},
      {"id with DEL", {}, claim_key("PAY", "\x7f"), Expect::invalid_argument, "control characters"},
      {"id with a C1 control (U+0085)",
       {},
       claim_key("PAY", "a\xc2\x85"),
       Expect::invalid_argument,
       "control characters; byte 1"},
      {"biz_type with a space", {}, claim_key("PAY NOW", "k"), Expect::invalid_argument, "byte 3"},
      {"biz_type with a quote", {}, claim_key("PAY'", "k"), Expect::invalid_argument, "byte 3"},
      {"biz_type with a NUL byte",
       {},
       claim_key("PAY\0"s, "k"),
       Expect::invalid_argument,
       "byte 3"},
      {"biz_type not ASCII", {}, claim_key("PAYÉ", "k"), Expect::invalid_argument, "byte 3"},
      {"compose_id part with the separator",
       {},
       [](S& s, C&) {
         s.claim(idem::Key{"PAY", idem::compose_id({"user-1", "a:b"})}, "", plain);
         return std::string("claimed");
       },
       Expect::invalid_argument,
       "contains the separator"},
      // Valid keys that look dangerous: stored verbatim, as their own records.
      {"SQL injection in the id",
       {},
       stored_key("PAY", "victim'; DROP TABLE t; --"),
       Expect::stored,
       "PAY/victim'; DROP TABLE t; --"},
      {"quote and OR 1=1 in the id",
       {},
       stored_key("PAY", "\" OR 1=1 --"),
       Expect::stored,
       "PAY/\" OR 1=1 --"},
      {"backslash escapes in the id",
       {},
       stored_key("PAY", "\\x00\\'"),
       Expect::stored,
       "PAY/\\x00\\'"},
      {"backtick in the id", {}, stored_key("PAY", "a`b"), Expect::stored, "PAY/a`b"},
      {"LIKE wildcards in the id", {}, stored_key("PAY", "%_"), Expect::stored, "PAY/%_"},
      {"case variant of a stored id", {}, stored_key("PAY", "ABC"), Expect::stored, "PAY/ABC"},
      {"trailing space variant", {}, stored_key("PAY", "abc "), Expect::stored, "PAY/abc "},
      {"leading space variant", {}, stored_key("PAY", " abc"), Expect::stored, "PAY/ abc"},
      {"case variant of a biz_type", {}, stored_key("pay", "abc"), Expect::stored, "pay/abc"},
      {"64 bytes of 4-byte UTF-8",
       {},
       stored_key("PAY", emoji64),
       Expect::stored,
       "PAY/" + emoji64},
      {"biz_type of 32 bytes",
       {},
       stored_key(too_long(32, 'B'), "k"),
       Expect::stored,
       too_long(32, 'B') + "/k"},
      {"the word NULL as an id", {}, stored_key("PAY", "NULL"), Expect::stored, "PAY/NULL"},
      // Options.
      {"zero lease",
       {},
       claim_opts({.lease = 0ms, .ttl = 1h}),
       Expect::invalid_argument,
       "lease must be positive"},
      {"negative lease",
       {},
       claim_opts({.lease = -5ms, .ttl = 1h}),
       Expect::invalid_argument,
       "lease must be positive"},
      {"zero ttl",
       {},
       claim_opts({.lease = 1ms, .ttl = 0ms}),
       Expect::invalid_argument,
       "ttl must be positive"},
      {"negative ttl",
       {},
       claim_opts({.lease = 1ms, .ttl = -1h}),
       Expect::invalid_argument,
       "ttl must be positive"},
      {"ttl over 100 years",
       {},
       claim_opts({.lease = 1s, .ttl = idem::max_ttl + 1ms}),
       Expect::invalid_argument,
       "ttl must be at most"},
      {"ttl shorter than the lease",
       {},
       claim_opts({.lease = 1h, .ttl = 1s}),
       Expect::invalid_argument,
       "must be at least the lease"},
      {"negative wait (run_once)",
       {},
       [](S& s, C&) {
         idem::run_once(
             s, idem::Key{"PAY", "fresh-wait"}, "", [] { return 1; }, idem::Options{.wait = -1ms});
         return std::string("ran");
       },
       Expect::invalid_argument,
       "wait must not be negative"},
      // Fingerprints.
      {"fingerprint of 129 bytes",
       {},
       claim_fp(too_long(129, 'f')),
       Expect::invalid_argument,
       "at most 128 bytes"},
      {"fingerprint with a space",
       {},
       claim_fp("ab cd"),
       Expect::invalid_argument,
       "printable ASCII without spaces; byte 2"},
      {"fingerprint with a NUL byte", {}, claim_fp("ab\0cd"s), Expect::invalid_argument, "byte 2"},
      {"fingerprint not ASCII", {}, claim_fp("ab\xc3\xa9"), Expect::invalid_argument, "byte 2"},
      {"JSON payload with invalid UTF-8",
       {},
       [](S& s, C&) {
         s.claim(idem::Key{"PAY", "fresh-json"}, idem::fingerprint(nlohmann::json{{"n", "\xff"}}),
                 plain);
         return std::string("claimed");
       },
       Expect::invalid_argument,
       "not canonical JSON"},
      {"other payload for a stored key",
       {},
       [](S& s, C&) {
         return std::string(
             idem::to_string(s.claim(idem::Key{"PAY", "abc"}, "fp-other", plain).verdict));
       },
       Expect::unchanged,
       "conflict"},
      // Snapshots and responses.
      {"snapshot over the limit (complete)", open_claim("snap-big"),
       [big](S& s, C& ctx) {
         s.complete(idem::Key{"PAY", "snap-big"}, ctx.ticket, big + "xx");
         return std::string("completed");
       },
       Expect::invalid_argument, "over the limit"},
      {"response over the limit (guard)", open_guard("snap-big-guard"),
       [big](S&, C& ctx) {
         ctx.guard->commit(big);
         return std::string("committed");
       },
       Expect::invalid_argument, "over the limit"},
      {"error over the limit (store fail)", open_claim("err-big"),
       [big](S& s, C& ctx) {
         s.fail(idem::Key{"PAY", "err-big"}, ctx.ticket, big + "xx", false);
         return std::string("failed");
       },
       Expect::invalid_argument, "over the limit"},
      {"response nlohmann_json cannot serialise", open_guard("unserialisable"),
       [](S&, C& ctx) {
         ctx.guard->commit(std::string("\xff\xfe"));
         return std::string("committed");
       },
       Expect::invalid_argument, "cannot be serialised"},
      {"snapshot at the limit is stored verbatim", open_claim("snap-limit"),
       [at_limit](S& s, C& ctx) {
         s.complete(idem::Key{"PAY", "snap-limit"}, ctx.ticket, at_limit);
         const auto r = s.find(idem::Key{"PAY", "snap-limit"});
         return r && r->snapshot == at_limit ? std::string("verbatim") : std::string("altered");
       },
       Expect::stored, "verbatim"},
      {"error over the limit (guard) is recorded as a note", open_guard("err-note"),
       [big](S& s, C& ctx) {
         ctx.guard->fail({{"detail", big}}, false);
         const auto r = s.find(idem::Key{"PAY", "err-note"});
         return r ? nlohmann::json::parse(r->snapshot).value("error", "") : std::string("none");
       },
       Expect::stored, "idem.error_too_large"},
      // Corrupt stored snapshots: what a replay of them does.
      {"corrupt stored snapshot (not JSON)",
       [](S& s, C&) {
         const idem::Key k{"PAY", "corrupt"};
         s.complete(k, s.claim(k, "", plain).record.ticket, "{\"receipt\": R-");
       },
       [](S& s, C&) {
         idem::run_once(s, idem::Key{"PAY", "corrupt"}, "", [] { return std::string("again"); });
         return std::string("replayed");
       },
       Expect::corrupt_record, "not valid JSON"},
      {"stored snapshot of another type",
       {},
       [](S& s, C&) {
         idem::run_once(s, idem::Key{"PAY", "victim"}, "", [] { return std::vector<int>{1}; });
         return std::string("replayed");
       },
       Expect::corrupt_record,
       "cannot be read as the requested type"},
      {"stored number too large for the response type",
       [](S& s, C&) {
         const idem::Key k{"PAY", "huge-number"};
         s.complete(k, s.claim(k, "", plain).record.ticket, "1e40");
       },
       [](S& s, C&) {
         idem::run_once(s, idem::Key{"PAY", "huge-number"}, "", [] { return 1; });
         return std::string("replayed");
       },
       Expect::corrupt_record, "does not fit"},
      // Out-of-order use and stale tickets.
      {"complete with a stale fence", open_claim("fenced"),
       [](S& s, C& ctx) {
         idem::Ticket forged = ctx.ticket;
         forged.fence += 1;
         s.complete(idem::Key{"PAY", "fenced"}, forged, "1");
         return std::string("completed");
       },
       Expect::lease_lost, "no longer held"},
      {"fail with another owner's token", open_claim("foreign"),
       [](S& s, C& ctx) {
         idem::Ticket forged = ctx.ticket;
         forged.owner = std::string(32, '0');
         s.fail(idem::Key{"PAY", "foreign"}, forged, R"({"error":"x"})", true);
         return std::string("failed");
       },
       Expect::lease_lost, "no longer held"},
      {"complete on a succeeded record",
       {},
       [](S& s, C&) {
         const auto r = s.find(idem::Key{"PAY", "victim"});
         s.complete(r->key, r->ticket, R"("twice")");
         return std::string("completed");
       },
       Expect::lease_lost,
       "no longer held"},
      {"commit on a replayed guard", open_guard("abc"),
       [](S&, C& ctx) {
         ctx.guard->commit(std::string("overwrite"));
         return std::string("committed");
       },
       Expect::usage_error, "only an acquired guard"},
      {"value() of an in_progress outcome",
       {},
       [](S& s, C&) {
         const auto out = idem::run_once(s, idem::Key{"PAY", "open"}, "", [] { return 1; });
         return std::to_string(out.value());
       },
       Expect::bad_access,
       "no value (verdict in_progress)"},
  };
  return cases;
}

// Runs every case; `checksum` covers the whole table, `rows` counts it.
template <class S>
void run_cases(S& store, std::vector<Case<S>> cases, const std::function<std::string()>& checksum,
               const std::function<long long()>& rows) {
  const auto seeds = seed(store);
  auto seed_text = [&] {
    std::string all;
    for (const auto& k : seeds)
      all += text_of(*store.find(k)) + "\n";
    return all;
  };
  const std::string seeds_before = seed_text();
  for (auto& c : cases) {
    Context<S> ctx;
    if (c.setup) c.setup(store, ctx);
    const std::string before = checksum();
    const long long count_before = rows();
    std::string got;
    try {
      got = c.act(store, ctx);
    } catch (const idem::Error& e) {
      got = classify(e) + ": " + e.what();
    } catch (const std::exception& e) {
      got = std::string("untyped ") + typeid(e).name() + ": " + e.what();
    }
    const std::string after = checksum();
    const long long count_after = rows();
    INFO("case: " << c.name << "\nexpected: " << name(c.expect) << " " << c.detail
                  << "\ngot: " << got.substr(0, 300));
    switch (c.expect) {
      case Expect::unchanged:
        CHECK(got == c.detail);
        CHECK(after == before);
        break;
      case Expect::stored:
        CHECK(got == c.detail);
        CHECK(after != before);  // the checksum sees the write (so it would see any other)
        CHECK(count_after - count_before <= 1);
        break;
      default:
        CHECK(got.rfind(std::string(name(c.expect)) + ": ", 0) == 0);
        CHECK(got.find(c.detail) != std::string::npos);
        CHECK(after == before);
        CHECK(count_after == count_before);
        break;
    }
    ctx.guard.reset();  // an open guard records its abandonment now, after the checksums
  }
  CHECK(seed_text() == seeds_before);  // the records that were there stayed untouched
  CHECK(cases.size() >= 30);
}

}  // namespace

TEST_CASE("hostile input on MemoryStore - typed errors, verbatim storage, an unchanged table") {
  idem::MemoryStore store;
  std::vector<idem::Key> touched;  // every key a case may reach: the checksum reads them all
  auto cases = common_cases<idem::MemoryStore>();
  cases.push_back({"an empty clock",
                   {},
                   [](idem::MemoryStore&, Context<idem::MemoryStore>&) {
                     idem::MemoryStore other{std::function<idem::TimePoint()>{}};
                     return std::string("constructed");
                   },
                   Expect::invalid_argument,
                   "clock must not be empty"});
  // The memory store cannot be listed, so its checksum covers its size and every key the cases
  // name (a write to any other key would change the size).
  const std::vector<std::pair<std::string, std::string>> names = {{"PAY", "abc"},
                                                                  {"PAY", "declined"},
                                                                  {"PAY", "open"},
                                                                  {"PAY", "victim"},
                                                                  {"PAY", "fresh-options"},
                                                                  {"PAY", "fresh-fp"},
                                                                  {"PAY", "fresh-wait"},
                                                                  {"PAY", "fresh-json"},
                                                                  {"PAY", "snap-big"},
                                                                  {"PAY", "snap-big-guard"},
                                                                  {"PAY", "err-big"},
                                                                  {"PAY", "unserialisable"},
                                                                  {"PAY", "snap-limit"},
                                                                  {"PAY", "err-note"},
                                                                  {"PAY", "corrupt"},
                                                                  {"PAY", "huge-number"},
                                                                  {"PAY", "fenced"},
                                                                  {"PAY", "foreign"},
                                                                  {"PAY", "k"},
                                                                  {"pay", "abc"},
                                                                  {"PAY", "ABC"}};
  auto checksum = [&] {
    std::string all = std::to_string(store.size()) + "\n";
    for (const auto& [biz, id] : names) {
      const auto r = store.find(idem::Key{biz, id});
      all += r ? text_of(*r) : "-";
      all += "\n";
    }
    return idem::fingerprint(all);
  };
  run_cases<idem::MemoryStore>(store, std::move(cases), checksum,
                               [&] { return static_cast<long long>(store.size()); });
}

TEST_CASE("hostile input on sqlite::Store - typed errors, verbatim storage, an unchanged table") {
  idem_test::TempDir dir;
  idem::sqlite::Store store{dir / "hostile.db"};
  using S = idem::sqlite::Store;
  auto cases = common_cases<S>();
  for (const std::string& table : std::vector<std::string>{
           "", "a b", "x; DROP TABLE idempotent_record", "a\"b", "a.b.c", too_long(65), "表"}) {
    cases.push_back({"table name " + idem::detail::printable(table),
                     {},
                     [table, &dir](S&, Context<S>&) {
                       S other{dir / "hostile.db", {.table = table}};
                       return std::string("opened");
                     },
                     Expect::invalid_argument,
                     "table"});
  }
  auto checksum = [&] {
    auto c = store.pool().acquire();
    auto rows = c->query("SELECT * FROM " + store.table() + " ORDER BY biz_type, idempotent_key");
    std::string all;
    while (rows.next()) {
      for (int i = 0; i < rows.columns(); ++i) {
        all += std::to_string(rows.type(i)) + ":" + rows.text(i) + "|";
      }
      all += "\n";
    }
    return idem::fingerprint(all);
  };
  run_cases<S>(store, std::move(cases), checksum, [&] { return idem_test::count(store); });
}

TEST_CASE("hostile input on mysql::Store - typed errors, verbatim storage, an unchanged table") {
  idem_test::Table t(2);
  using S = idem::mysql::Store;
  auto cases = common_cases<S>();
  for (const std::string& table : std::vector<std::string>{
           "", "a b", "x; DROP TABLE idempotent_record", "a`b", "a.b.c", too_long(65), "表"}) {
    cases.push_back({"table name " + idem::detail::printable(table),
                     {},
                     [table, &t](S&, Context<S>&) {
                       S other{t.pool, {.table = table}};
                       return std::string("constructed");
                     },
                     Expect::invalid_argument,
                     "table"});
  }
  // CHECKSUM TABLE ... EXTENDED reads every row (it is not a prepared statement: plain C API).
  auto checksum = [&] {
    auto c = t.pool->acquire();
    const std::string sql = "CHECKSUM TABLE " + t.store.table() + " EXTENDED";
    MYSQL* m = c->native();
    if (mysql_real_query(m, sql.data(), sql.size()) != 0) return "error: "s + mysql_error(m);
    MYSQL_RES* res = mysql_store_result(m);
    if (res == nullptr) return "error: "s + mysql_error(m);
    MYSQL_ROW row = mysql_fetch_row(res);
    std::string sum = row && row[1] ? row[1] : "NULL";
    mysql_free_result(res);
    return sum;
  };
  const std::string first = checksum();
  REQUIRE(first.rfind("error", 0) != 0);
  REQUIRE(first != "NULL");
  run_cases<S>(t.store, std::move(cases), checksum, [&] { return t.count(); });
}
