// idem::http::handle() on in-process stores: keys, fingerprints, the status table, which
// responses are stored, replays, and races of real threads counting business executions.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <idem/http.hpp>
#include <idem/idem.hpp>
#include <idem/resolver.hpp>
#include <idem/sqlite.hpp>

#include "../support/http_messages.hpp"
#include "../support/sqlite_file.hpp"
#include "../support/strings.hpp"

using idem::http::Policy;
using idem::http::Request;
using idem::http::Response;
using nlohmann::json;

namespace {

struct MemoryFixture {
  idem::ManualClock clock;
  idem::MemoryStore store{[this] { return clock.now(); }};
  idem::MemoryStore& get() { return store; }
};

struct SqliteFixture {
  idem_test::TempDir dir;
  idem::sqlite::Store store{dir / "http.db"};
  idem::sqlite::Store& get() { return store; }
};

json body_of(const Response& r) {
  return json::parse(r.body);
}

using idem_test::created;
using idem_test::post;
using idem_test::problem;
using idem_test::replayed;

}  // namespace

TEMPLATE_TEST_CASE("handle: first request runs, duplicates replay status, body and stored headers",
                   "", MemoryFixture, SqliteFixture) {
  TestType f;
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  const Response first = idem::http::handle(f.get(), post(R"("k-1")"), business);
  CHECK(first == created(1));  // the first caller gets the business response untouched
  for (int i = 0; i < 3; ++i) {
    const Response again = idem::http::handle(f.get(), post(R"("k-1")"), business);
    CHECK(again.status == 201);
    CHECK(again.body == first.body);
    CHECK(again.headers == idem::http::Headers{{"Content-Type", "application/json"},
                                               {"Location", "/payments/pay_1"},
                                               {"Idempotent-Replayed", "true"}});
  }
  CHECK(runs == 1);
  // The record is an ordinary succeeded idem record under the policy's biz_type.
  const auto record = f.get().find(idem::Key{"http", "k-1"});
  REQUIRE(record);
  CHECK(record->status == idem::Status::succeeded);
}

TEMPLATE_TEST_CASE("handle: same key with another payload, target or method is 422 - nothing runs",
                   "", MemoryFixture, SqliteFixture) {
  TestType f;
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  REQUIRE(idem::http::handle(f.get(), post(R"("k-2")"), business).status == 201);

  problem(
      idem::http::handle(f.get(), post(R"("k-2")", R"({"amount":101,"currency":"EUR"})"), business),
      422, "key-reused");
  Request other_target = post(R"("k-2")");
  other_target.target = "/refunds";
  problem(idem::http::handle(f.get(), other_target, business), 422, "key-reused");
  Request other_method = post(R"("k-2")");
  other_method.method = "PUT";
  problem(idem::http::handle(f.get(), other_method, business), 422, "key-reused");
  CHECK(runs == 1);

  // The same JSON written differently is the same payload: a replay, not a conflict.
  const Response same = idem::http::handle(
      f.get(), post(R"("k-2")", "{ \"currency\" : \"EUR\",\n \"amount\" : 100.0 }"), business);
  CHECK(same.status == 201);
  CHECK(replayed(same));
  CHECK(runs == 1);
}

TEMPLATE_TEST_CASE("handle: missing or malformed keys are 400 and write nothing", "", MemoryFixture,
                   SqliteFixture) {
  TestType f;
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  const json missing = problem(idem::http::handle(f.get(), post(""), business), 400, "key-missing");
  CHECK_THAT(missing.at("detail").get<std::string>(), Catch::Contains("Idempotency-Key"));
  CHECK_THAT(missing.at("detail").get<std::string>(), Catch::Contains("UUIDv7"));

  for (const std::string bad :
       {R"("")", R"("a", "b")", "\"ctl\x01\"", R"("x" y)", " ", "k 3", "k-3;v=1", "k-3, k-3",
        "k-3,\"k-3\"", "k\"3", "caf\xc3\xa9", "ctl\x01", "?1", "k*3"}) {
    INFO("key field: " << bad);
    problem(idem::http::handle(f.get(), post(bad), business), 400, "key-invalid");
  }
  // The header sent twice, even with the same value, is a list and not a key.
  Request twice = post(R"("k-3")");
  twice.headers.push_back({"idempotency-key", R"("k-3")"});
  problem(idem::http::handle(f.get(), twice, business), 400, "key-invalid");

  const std::string k64(64, 'k');
  const json too_long =
      problem(idem::http::handle(f.get(), post('"' + k64 + "k\""), business), 400, "key-invalid");
  CHECK_THAT(too_long.at("detail").get<std::string>(), Catch::Contains("65 bytes; at most 64"));
  const json too_long_bare =
      problem(idem::http::handle(f.get(), post(k64 + "k"), business), 400, "key-invalid");
  CHECK_THAT(too_long_bare.at("detail").get<std::string>(),
             Catch::Contains("65 bytes; at most 64"));
  CHECK(runs == 0);
  CHECK_FALSE(f.get().find(idem::Key{"http", "k-3"}));
  CHECK(f.get().purge_expired(1000, 1000) == 0);

  // Exactly the limit is fine, in either form; header names match case-insensitively.
  Request lower = post("");
  lower.headers.push_back({"IDEMPOTENCY-KEY", '"' + k64 + '"'});
  CHECK(idem::http::handle(f.get(), lower, business).status == 201);
  CHECK(replayed(idem::http::handle(f.get(), post(k64), business)));
  CHECK(runs == 1);
}

TEMPLATE_TEST_CASE("handle: a bare key is the same key as its quoted form - the business runs once",
                   "", MemoryFixture, SqliteFixture) {
  TestType f;
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  const std::string uuid = "018f2e4c-7b1a-4c2e-9d1a-2b3c4d5e6f70";
  const Response first = idem::http::handle(f.get(), post('"' + uuid + '"'), business);
  CHECK(first == created(1));
  const Response bare = idem::http::handle(f.get(), post(uuid), business);
  CHECK(replayed(bare));
  CHECK(bare.body == first.body);
  CHECK(replayed(idem::http::handle(f.get(), post(" " + uuid + "\t"), business)));  // OWS
  CHECK(runs == 1);
  const auto record = f.get().find(idem::Key{"http", uuid});
  REQUIRE(record);
  CHECK(record->status == idem::Status::succeeded);

  // The other way round, with a base64 key: bare first, then quoted.
  CHECK(idem::http::handle(f.get(), post("q83vEjRWeJA+/w=="), business).status == 201);
  CHECK(replayed(idem::http::handle(f.get(), post(R"("q83vEjRWeJA+/w==")"), business)));
  CHECK(runs == 2);
  CHECK(f.get().find(idem::Key{"http", "q83vEjRWeJA+/w=="}));

  // A bare header and the body member agree when they hold the same key.
  Policy with_body;
  with_body.body_field = "idempotency_key";
  const std::string body = R"({"idempotency_key":"b-bare","amount":100})";
  CHECK(idem::http::handle(f.get(), post("b-bare", body), business, with_body).status == 201);
  CHECK(replayed(idem::http::handle(f.get(), post(R"("b-bare")", body), business, with_body)));
  CHECK(replayed(idem::http::handle(f.get(), post("", body), business, with_body)));
  CHECK(runs == 3);
}

TEMPLATE_TEST_CASE("handle: KeySyntax::quoted_only refuses a bare key like any other bad key", "",
                   MemoryFixture, SqliteFixture) {
  TestType f;
  Policy strict;
  strict.key_syntax = idem::http::KeySyntax::quoted_only;
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  const std::string uuid = "018f2e4c-7b1a-4c2e-9d1a-2b3c4d5e6f70";
  const json bare =
      problem(idem::http::handle(f.get(), post(uuid), business, strict), 400, "key-invalid");
  CHECK_THAT(bare.at("detail").get<std::string>(), Catch::Contains("not quoted"));
  CHECK_THAT(bare.at("detail").get<std::string>(),
             Catch::Contains("in the Idempotency-Key header"));
  // The same problem as for every other malformed key.
  const json list = problem(idem::http::handle(f.get(), post(R"("a", "b")"), business, strict), 400,
                            "key-invalid");
  CHECK(bare.at("type") == list.at("type"));
  CHECK(bare.at("title") == list.at("title"));
  CHECK(runs == 0);
  CHECK_FALSE(f.get().find(idem::Key{"http", uuid}));

  // The quoted form still works, and its bare duplicate is refused rather than replayed.
  CHECK(idem::http::handle(f.get(), post('"' + uuid + '"'), business, strict).status == 201);
  problem(idem::http::handle(f.get(), post(uuid), business, strict), 400, "key-invalid");
  CHECK(replayed(idem::http::handle(f.get(), post('"' + uuid + '"'), business, strict)));
  CHECK(runs == 1);
}

TEST_CASE("handle: store totals - a malformed key leaves the memory store empty") {
  idem::MemoryStore store;
  int runs = 0;
  const std::string too_long = "\"" + std::string(65, 'x') + "\"";
  for (const std::string& bad :
       {std::string{}, std::string{"t o k"}, std::string{R"("")"}, too_long, too_long.substr(1)})
    CHECK(idem::http::handle(store, post(bad), [&] { return created(++runs); }).status == 400);
  CHECK(store.size() == 0);
  CHECK(runs == 0);
}

TEST_CASE_METHOD(MemoryFixture,
                 "handle: a duplicate while the first runs gets 409 with Retry-After") {
  int runs = 0;
  Response inner;
  const Response outer = idem::http::handle(store, post(R"("k-4")"), [&] {
    ++runs;
    inner = idem::http::handle(store, post(R"("k-4")"), [&] { return created(++runs); });
    return created(runs);
  });
  CHECK(outer.status == 201);
  problem(inner, 409, "key-in-use");
  CHECK(inner.header("Retry-After") == std::optional<std::string>{"1"});
  CHECK(runs == 1);

  Policy no_retry_after;
  no_retry_after.retry_after_seconds = 0;
  Response inner2;
  idem::http::handle(
      store, post(R"("k-4b")"),
      [&] {
        inner2 = idem::http::handle(
            store, post(R"("k-4b")"), [&] { return created(0); }, no_retry_after);
        return created(1);
      },
      no_retry_after);
  CHECK(inner2.status == 409);
  CHECK_FALSE(inner2.header("Retry-After"));

  // A conflicting payload is 422 even while the first request is still running.
  Response inner3;
  idem::http::handle(store, post(R"("k-4c")"), [&] {
    inner3 = idem::http::handle(store, post(R"("k-4c")", "{}"), [&] { return created(0); });
    return created(1);
  });
  problem(inner3, 422, "key-reused");
}

TEST_CASE_METHOD(MemoryFixture, "handle: a worker that died keeps 409 until its lease runs out") {
  Policy policy;
  policy.claim.lease = std::chrono::seconds{10};
  // A claim whose worker never finished (crashed): taken directly through the store.
  const auto crashed = store.claim(idem::Key{"http", "k-5"},
                                   idem::http::request_fingerprint(post(R"("k-5")")), policy.claim);
  REQUIRE(crashed.verdict == idem::Verdict::acquired);
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  problem(idem::http::handle(store, post(R"("k-5")"), business, policy), 409, "key-in-use");
  clock.advance(std::chrono::seconds{11});
  CHECK(idem::http::handle(store, post(R"("k-5")"), business, policy).status == 201);
  CHECK(runs == 1);
}

TEST_CASE_METHOD(MemoryFixture,
                 "handle: a business that throws EffectUnknown answers 503 outcome-unknown, and "
                 "so do its duplicates, without running") {
  int runs = 0;
  const auto timed_out = [&]() -> Response {
    ++runs;
    throw idem::EffectUnknown("the acquirer timed out after the capture was sent");
  };
  for (int i = 0; i < 2; ++i) {
    const Response r = idem::http::handle(store, post(R"("k-7")"), timed_out);
    problem(r, 503, "outcome-unknown");
    CHECK(r.header("Retry-After") == std::optional<std::string>{"60"});
  }
  CHECK(runs == 1);
  const auto stored = store.find(idem::Key{"http", "k-7"});
  REQUIRE(stored.has_value());
  CHECK(stored->status == idem::Status::outcome_unknown);
}

TEST_CASE_METHOD(MemoryFixture,
                 "handle: a crashed attempt whose outcome is unknown is 503 with Retry-After, "
                 "nothing runs, until a repair settles it") {
  idem::Resolvers resolvers;
  resolvers.add("http", [](const idem::Record&, const idem::ResolveContext&) {
    return idem::Resolution::unknown("the gateway does not answer");
  });
  Policy policy;
  policy.claim.lease = std::chrono::seconds{10};
  policy.claim.resolvers = &resolvers;
  const idem::Key key{"http", "k-6"};
  const auto crashed =
      store.claim(key, idem::http::request_fingerprint(post(R"("k-6")")), policy.claim);
  REQUIRE(crashed.verdict == idem::Verdict::acquired);
  clock.advance(std::chrono::seconds{11});
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  for (int i = 0; i < 2; ++i) {
    const Response r = idem::http::handle(store, post(R"("k-6")"), business, policy);
    problem(r, 503, "outcome-unknown");
    CHECK(r.header("Retry-After") == std::optional<std::string>{"60"});
  }
  CHECK(runs == 0);
  CHECK(store.find(key)->status == idem::Status::outcome_unknown);

  // An operator learns the payment was captured and completes the record with the response.
  const idem::Record unknown = *store.find(key);
  store.repair(
      key,
      {.action = idem::RepairAction::complete,
       .fence = unknown.ticket.fence,
       .snapshot = idem::http::detail::recording_for(created(7), policy, "test").snapshot.dump(),
       .reason = "the gateway's report shows the capture"});
  const Response replay = idem::http::handle(store, post(R"("k-6")"), business, policy);
  CHECK(replay.status == 201);
  CHECK(replayed(replay));
  CHECK(body_of(replay)["id"] == "pay_7");
  CHECK(runs == 0);
}

TEMPLATE_TEST_CASE("handle: 5xx and transient 4xx are never stored - a retry runs again", "",
                   MemoryFixture, SqliteFixture) {
  TestType f;
  for (const int status : {500, 502, 503, 504, 408, 425, 429}) {
    INFO("status " << status);
    const std::string key = "\"t-" + std::to_string(status) + '"';
    int runs = 0;
    const auto failing = [&] {
      ++runs;
      return Response{status, {{"Content-Type", "text/plain"}}, "try later"};
    };
    const Response first = idem::http::handle(f.get(), post(key), failing);
    CHECK(first.status == status);
    CHECK(idem::http::handle(f.get(), post(key), failing).status == status);
    CHECK(runs == 2);
    const auto record = f.get().find(idem::Key{"http", key.substr(1, key.size() - 2)});
    REQUIRE(record);
    CHECK(record->status == idem::Status::failed);
    CHECK(record->retryable);
    // Once the business succeeds, that is what every later retry gets.
    CHECK(idem::http::handle(f.get(), post(key), [&] { return created(++runs); }).status == 201);
    CHECK(replayed(idem::http::handle(f.get(), post(key), [&] { return created(++runs); })));
    CHECK(runs == 3);
  }
}

TEMPLATE_TEST_CASE("handle: final 4xx are replayed by default, and run again with successes only",
                   "", MemoryFixture, SqliteFixture) {
  TestType f;
  int runs = 0;
  const auto declined = [&] {
    ++runs;
    return idem::http::problem_response(
        {"https://example.test/declined", "Card declined", 402, "the issuer declined the card"});
  };
  const Response first = idem::http::handle(f.get(), post(R"("d-1")"), declined);
  const Response again = idem::http::handle(f.get(), post(R"("d-1")"), declined);
  CHECK(first.status == 402);
  CHECK(again.status == 402);
  CHECK(again.body == first.body);
  CHECK(again.header("Content-Type") == first.header("Content-Type"));
  CHECK(replayed(again));
  CHECK(runs == 1);
  const auto record = f.get().find(idem::Key{"http", "d-1"});
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK_FALSE(record->retryable);

  Policy successes;
  successes.stored = idem::http::StoredResponses::successes;
  CHECK(idem::http::handle(f.get(), post(R"("d-2")"), declined, successes).status == 402);
  CHECK(idem::http::handle(f.get(), post(R"("d-2")"), declined, successes).status == 402);
  CHECK(runs == 3);
  // 3xx counts as a success under both policies.
  const auto see_other = [&] {
    ++runs;
    return Response{303, {{"Location", "/payments/pay_9"}}, ""};
  };
  CHECK(idem::http::handle(f.get(), post(R"("d-3")"), see_other, successes).status == 303);
  const Response redirect = idem::http::handle(f.get(), post(R"("d-3")"), see_other, successes);
  CHECK(redirect.status == 303);
  CHECK(redirect.header("Location") == std::optional<std::string>{"/payments/pay_9"});
  CHECK(runs == 4);
}

TEST_CASE_METHOD(MemoryFixture,
                 "handle: an exception from the business propagates and a retry runs") {
  int runs = 0;
  CHECK_THROWS_AS(idem::http::handle(store, post(R"("e-1")"),
                                     [&]() -> Response {
                                       ++runs;
                                       throw std::runtime_error("card network down");
                                     }),
                  std::runtime_error);
  CHECK(idem::http::handle(store, post(R"("e-1")"), [&] { return created(++runs); }).status == 201);
  CHECK(runs == 2);
  // A status outside 100-599 is the handler's bug: refused, recorded as retryable.
  CHECK_THROWS_AS(idem::http::handle(store, post(R"("e-2")"),
                                     [&] {
                                       return Response{42, {}, ""};
                                     }),
                  idem::InvalidArgument);
  CHECK(idem::http::handle(store, post(R"("e-2")"), [&] { return created(++runs); }).status == 201);
}

TEMPLATE_TEST_CASE("handle: the body member fallback for proxies that strip the header", "",
                   MemoryFixture, SqliteFixture) {
  TestType f;
  Policy policy;
  policy.body_field = "idempotency_key";
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  const std::string body = R"({"idempotency_key":"b-1","amount":100})";
  CHECK(idem::http::handle(f.get(), post("", body), business, policy).status == 201);
  CHECK(replayed(idem::http::handle(f.get(), post("", body), business, policy)));
  // The header and the body member may both carry it when they agree.
  CHECK(replayed(idem::http::handle(f.get(), post(R"("b-1")", body), business, policy)));
  CHECK(runs == 1);
  CHECK(f.get().find(idem::Key{"http", "b-1"}));

  problem(idem::http::handle(f.get(), post(R"("b-2")", body), business, policy), 400,
          "key-invalid");
  problem(idem::http::handle(f.get(), post("", R"({"idempotency_key":7})"), business, policy), 400,
          "key-invalid");
  problem(idem::http::handle(f.get(), post("", R"({"idempotency_key":""})"), business, policy), 400,
          "key-invalid");
  problem(idem::http::handle(f.get(), post("", R"({"idempotency_key":"a\nb"})"), business, policy),
          400, "key-invalid");
  const json missing =
      problem(idem::http::handle(f.get(), post("", R"({"amount":1})"), business, policy), 400,
              "key-missing");
  CHECK_THAT(missing.at("detail").get<std::string>(), Catch::Contains("idempotency_key"));
  problem(idem::http::handle(f.get(), post("", "not json"), business, policy), 400, "key-missing");
  // Without body_field the member is just payload.
  problem(idem::http::handle(f.get(), post("", body), business), 400, "key-missing");
  CHECK(runs == 1);
}

TEST_CASE_METHOD(MemoryFixture, "handle: scopes keep clients apart") {
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  Request alice = post(R"("same")");
  alice.scope = "alice";
  Request bob = post(R"("same")");
  bob.scope = "bob";
  CHECK(idem::http::handle(store, alice, business).status == 201);
  CHECK(idem::http::handle(store, bob, business).status == 201);
  CHECK(replayed(idem::http::handle(store, alice, business)));
  CHECK(runs == 2);
  CHECK(store.find(idem::Key{"http", "alice:same"}));
  // The scope takes room from the key: "alice:" leaves 58 bytes.
  Request long_key = post(idem_test::quoted(std::string(59, 'x')));
  long_key.scope = "alice";
  CHECK_THAT(json::parse(idem::http::handle(store, long_key, business).body)
                 .at("detail")
                 .get<std::string>(),
             Catch::Contains("59 bytes; at most 58"));
  // A key may hold ':' (the scope may not, so the split is unambiguous).
  Request colon = post(R"("a:b")");
  colon.scope = "carol";
  CHECK(idem::http::handle(store, colon, business).status == 201);
  Request bad_scope = post(R"("k")");
  bad_scope.scope = "a:b";
  CHECK_THROWS_AS(idem::http::handle(store, bad_scope, business), idem::InvalidArgument);
  bad_scope.scope = std::string(63, 's');
  CHECK_THROWS_AS(idem::http::handle(store, bad_scope, business), idem::InvalidArgument);
  bad_scope.scope = "tab\there";
  CHECK_THROWS_AS(idem::http::handle(store, bad_scope, business), idem::InvalidArgument);
  CHECK(runs == 3);
}

TEST_CASE_METHOD(MemoryFixture, "handle: binary and large responses") {
  int runs = 0;
  std::string binary;
  for (int i = 0; i < 256; ++i)
    binary += static_cast<char>(i);
  for (const std::string& body : {binary, binary.substr(0, 1), binary.substr(0, 2),
                                  binary.substr(250), std::string("\xff\xfe")}) {
    const std::string key = "\"bin-" + std::to_string(runs) + '"';
    const auto business = [&] {
      ++runs;
      return Response{200, {{"Content-Type", "application/octet-stream"}}, body};
    };
    CHECK(idem::http::handle(store, post(key), business).body == body);
    const Response again = idem::http::handle(store, post(key), business);
    CHECK(replayed(again));
    CHECK(again.body == body);  // byte for byte, kept as base64 in the record
  }
  CHECK(runs == 5);

  // Too large to store: the first caller gets it; a retry does not run the business again.
  const std::string huge(idem::max_snapshot_bytes + 1, 'x');
  int big_runs = 0;
  const auto big = [&] {
    ++big_runs;
    return Response{200, {{"Content-Type", "text/plain"}}, huge};
  };
  CHECK(idem::http::handle(store, post(R"("big")"), big).body == huge);
  const Response note = idem::http::handle(store, post(R"("big")"), big);
  CHECK(replayed(note));
  const json j =
      problem(Response{note.status, {note.headers.front()}, note.body}, 500, "response-unstorable");
  CHECK_THAT(j.at("detail").get<std::string>(), Catch::Contains("ran once"));
  CHECK(big_runs == 1);
}

TEMPLATE_TEST_CASE("handle: Policy::replay_header names the header that marks a replay", "",
                   MemoryFixture, SqliteFixture) {
  TestType f;
  Policy policy;
  policy.replay_header = "X-Idempotency-Replay";
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  const Response first = idem::http::handle(f.get(), post(R"("r-1")"), business, policy);
  CHECK(first == created(1));
  CHECK_FALSE(first.header("X-Idempotency-Replay"));
  const Response again = idem::http::handle(f.get(), post(R"("r-1")"), business, policy);
  CHECK(again.headers == idem::http::Headers{{"Content-Type", "application/json"},
                                             {"Location", "/payments/pay_1"},
                                             {"X-Idempotency-Replay", "true"}});
  CHECK_FALSE(again.header("Idempotent-Replayed"));
  // A replayed refusal (a final 4xx) is marked the same way.
  const auto declined = [&] {
    ++runs;
    return idem::http::problem_response({"about:blank", "Card declined", 402, "declined"});
  };
  CHECK(idem::http::handle(f.get(), post(R"("r-2")"), declined, policy).status == 402);
  const Response declined_again = idem::http::handle(f.get(), post(R"("r-2")"), declined, policy);
  CHECK(declined_again.header("x-idempotency-replay") == std::optional<std::string>{"true"});
  CHECK_FALSE(declined_again.header("Idempotent-Replayed"));
  CHECK(runs == 2);
  // The default stays Idempotent-Replayed.
  const Policy defaults;
  CHECK(defaults.replay_header == idem::http::replayed_header);
  CHECK(idem::http::replayed_header == "Idempotent-Replayed");
}

TEST_CASE_METHOD(MemoryFixture, "handle: policy and record errors are typed exceptions") {
  Policy bad;
  bad.biz_type = "has space";
  CHECK_THROWS_AS(idem::http::handle(
                      store, post(R"("p")"), [] { return created(1); }, bad),
                  idem::InvalidArgument);
  bad = Policy{};
  bad.claim.lease = std::chrono::milliseconds{0};
  CHECK_THROWS_AS(idem::http::validate(bad), idem::InvalidArgument);
  bad = Policy{};
  bad.header = "";
  CHECK_THROWS_AS(idem::http::validate(bad), idem::InvalidArgument);
  bad.header = "Idempotency Key";
  CHECK_THROWS_WITH(idem::http::validate(bad), Catch::Contains("Policy::header must be"));
  // The replay header must be a field name (a token) of its own.
  for (const std::string name :
       {"", "Idempotent Replayed", "Replayed:", "X-R\t", "X-R\r\nX: 1", "X-R\xc3\xa9", "(x)",
        "a\"b", "Content-Type", "content-type", "LOCATION"}) {
    INFO("replay_header: " << name);
    bad = Policy{};
    bad.replay_header = name;
    CHECK_THROWS_AS(idem::http::validate(bad), idem::InvalidArgument);
    CHECK_THROWS_WITH(idem::http::validate(bad), Catch::Contains("Policy::replay_header"));
    int runs = 0;
    CHECK_THROWS_AS(idem::http::handle(
                        store, post(R"("p-bad")"), [&] { return created(++runs); }, bad),
                    idem::InvalidArgument);
    CHECK(runs == 0);
  }
  CHECK_FALSE(store.find(idem::Key{"http", "p-bad"}));
  bad = Policy{};
  bad.replayed_headers = {};
  bad.replay_header = "Location";  // not stored by this policy, so free to use
  CHECK_NOTHROW(idem::http::validate(bad));
  for (const std::string name : {"X-Replayed", "x_replayed", "!#$%&'*+-.^_`|~0aZ"}) {
    bad.replay_header = name;
    CHECK_NOTHROW(idem::http::validate(bad));
  }
  bad = Policy{};
  bad.retry_after_seconds = -1;
  CHECK_THROWS_AS(idem::http::validate(bad), idem::InvalidArgument);

  // A record of the same biz_type written by non-HTTP code is not a response to replay.
  const Request req = post(R"("shared")");
  auto out =
      idem::run_once(store, idem::Key{"http", "shared"}, idem::http::request_fingerprint(req), [] {
        return json{{"not", "a response"}};
      });
  REQUIRE(out);
  CHECK_THROWS_AS(idem::http::handle(store, req, [] { return created(1); }), idem::CorruptRecord);
}

TEST_CASE("handle: fingerprints - canonical JSON, raw bytes otherwise") {
  using idem::http::request_fingerprint;
  Request a = post("", R"({"a":1,"b":[1,2]})");
  Request b = post("", "{ \"b\" : [1, 2], \"a\" : 1 }");
  CHECK(request_fingerprint(a) == request_fingerprint(b));
  a.headers = {{"Content-Type", "application/merchant+json; charset=utf-8"}};
  CHECK(request_fingerprint(a) == request_fingerprint(b));
  a.headers = {{"Content-Type", "text/plain"}};  // not JSON: the bytes count
  CHECK(request_fingerprint(a) != request_fingerprint(b));
  Request c = post("", "\xff not json");  // invalid JSON with a JSON type: hashed as bytes
  CHECK(request_fingerprint(c).size() == 64);
  Request d = post("");
  d.target = "/payments?x=\xff";  // odd bytes in the target do not throw
  CHECK(request_fingerprint(d).size() == 64);
  // The key header itself is not part of the payload.
  CHECK(request_fingerprint(post(R"("x")")) == request_fingerprint(post(R"("y")")));
}

TEMPLATE_TEST_CASE("handle: 32 threads send the same request at once - one execution", "",
                   MemoryFixture, SqliteFixture) {
  TestType f;
  constexpr int threads = 32;
  std::atomic<int> runs{0};
  std::atomic<bool> go{false};
  std::vector<Response> answers(threads);
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load())
        std::this_thread::yield();
      try {
        answers[t] = idem::http::handle(f.get(), post(R"("race-1")"), [&] {
          const int n = ++runs;
          std::this_thread::sleep_for(std::chrono::milliseconds{50});
          return created(n);
        });
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  go = true;
  for (auto& t : pool)
    t.join();
  int fresh = 0, replays = 0, busy = 0, other = 0;
  for (int t = 0; t < threads; ++t) {
    INFO("thread " << t << ": " << errors[t]);
    CHECK(errors[t].empty());
    const Response& r = answers[t];
    if (r.status == 201 && !replayed(r)) {
      ++fresh;
      CHECK(r == created(1));
    } else if (r.status == 201) {
      ++replays;
      CHECK(body_of(r) == body_of(created(1)));
    } else if (r.status == 409) {
      ++busy;
    } else {
      ++other;
    }
  }
  CHECK(runs == 1);
  CHECK(fresh == 1);
  CHECK(other == 0);
  CHECK(fresh + replays + busy == threads);
}

TEMPLATE_TEST_CASE("handle: with Policy::claim.wait, duplicates wait and replay instead of 409", "",
                   MemoryFixture, SqliteFixture) {
  TestType f;
  Policy policy;
  policy.claim.wait = std::chrono::seconds{20};
  constexpr int threads = 8;
  std::atomic<int> runs{0};
  std::atomic<bool> go{false};
  std::vector<int> statuses(threads, 0);
  std::vector<char> replays(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load())
        std::this_thread::yield();
      try {
        const Response r = idem::http::handle(
            f.get(), post(R"("wait-1")"),
            [&] {
              const int n = ++runs;
              std::this_thread::sleep_for(std::chrono::milliseconds{100});
              return created(n);
            },
            policy);
        statuses[t] = r.status;
        replays[t] = replayed(r) ? 1 : 0;
      } catch (...) {
        statuses[t] = -1;
      }
    });
  }
  go = true;
  for (auto& t : pool)
    t.join();
  CHECK(runs == 1);
  int replay_count = 0;
  for (int t = 0; t < threads; ++t) {
    CHECK(statuses[t] == 201);
    replay_count += replays[t];
  }
  CHECK(replay_count == threads - 1);
}
