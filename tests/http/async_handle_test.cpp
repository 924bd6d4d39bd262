// idem::http::async_handle() on a MemoryStore through idem::async::InlineStore, on an
// io_context: the rows of handle()'s table (handle_test.cpp) with a coroutine business, the
// same answers and records as handle() step by step, duplicates racing on one loop thread,
// Policy::claim.wait on a timer, and cancellation.
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>
#include <idem/http.hpp>
#include <idem/http/async_handle.hpp>
#include <idem/idem.hpp>

#include "../support/http_messages.hpp"
#include "../support/loop.hpp"
#include "../support/strings.hpp"

namespace net = idem::async::net;
using namespace std::chrono_literals;
using namespace net::experimental::awaitable_operators;
using idem::http::Policy;
using idem::http::Request;
using idem::http::Response;
using nlohmann::json;

namespace {

struct Loop {
  idem::ManualClock clock;
  idem::MemoryStore memory{[this] { return clock.now(); }};
  idem::async::InlineStore<idem::MemoryStore> store{memory};
  net::io_context io;

  template <class T>
  T run(net::awaitable<T> a) {
    return idem_test::run_on(io, std::move(a));
  }

  // async_handle run to its end on the loop.
  template <class F>
  Response handle(const Request& request, F business, const Policy& policy = {}) {
    return run(idem::http::async_handle(store, request, std::move(business), policy));
  }
};

using idem_test::created;
using idem_test::post;
using idem_test::problem;
using idem_test::replayed;

// The business as a coroutine: the gateway call is a timer, so the loop serves other work.
net::awaitable<Response> charge(int n, std::chrono::milliseconds takes) {
  co_await idem::async::sleep_for(takes);
  co_return created(n);
}

}  // namespace

TEST_CASE_METHOD(Loop,
                 "async_handle: first request runs, duplicates replay status, body and stored "
                 "headers") {
  int runs = 0;
  const auto business = [&]() -> net::awaitable<Response> {
    co_return co_await charge(++runs, 1ms);
  };
  const Response first = handle(post(R"("k-1")"), business);
  CHECK(first == created(1));  // the first caller gets the business response untouched
  for (int i = 0; i < 3; ++i) {
    const Response again = handle(post(R"("k-1")"), business);
    CHECK(again.status == 201);
    CHECK(again.body == first.body);
    CHECK(again.headers == idem::http::Headers{{"Content-Type", "application/json"},
                                               {"Location", "/payments/pay_1"},
                                               {"Idempotent-Replayed", "true"}});
  }
  CHECK(runs == 1);
  const auto record = memory.find(idem::Key{"http", "k-1"});
  REQUIRE(record);
  CHECK(record->status == idem::Status::succeeded);

  // A business that is a plain function, not a coroutine, is run the same way.
  const auto plain = [&] { return created(++runs); };
  CHECK(handle(post(R"("k-1b")"), plain) == created(2));
  CHECK(replayed(handle(post(R"("k-1b")"), plain)));
  CHECK(runs == 2);
}

TEST_CASE_METHOD(Loop,
                 "async_handle: same key with another payload, target or method is 422 - nothing "
                 "runs") {
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  REQUIRE(handle(post(R"("k-2")"), business).status == 201);
  problem(handle(post(R"("k-2")", R"({"amount":101,"currency":"EUR"})"), business), 422,
          "key-reused");
  Request other_target = post(R"("k-2")");
  other_target.target = "/refunds";
  problem(handle(other_target, business), 422, "key-reused");
  Request other_method = post(R"("k-2")");
  other_method.method = "PUT";
  problem(handle(other_method, business), 422, "key-reused");
  // The same JSON written differently is the same payload: a replay.
  CHECK(replayed(
      handle(post(R"("k-2")", "{ \"currency\" : \"EUR\", \"amount\" : 100.0 }"), business)));
  CHECK(runs == 1);
}

TEST_CASE_METHOD(Loop, "async_handle: missing or malformed keys are 400 and write nothing") {
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  const json missing = problem(handle(post(""), business), 400, "key-missing");
  CHECK_THAT(missing.at("detail").get<std::string>(), Catch::Contains("Idempotency-Key"));
  for (const std::string bad : {R"("")", R"("a", "b")", "k 3", "k-3;v=1", "caf\xc3\xa9", "k*3"}) {
    INFO("key field: " << bad);
    problem(handle(post(bad), business), 400, "key-invalid");
  }
  const json too_long =
      problem(handle(post(idem_test::quoted(std::string(65, 'k'))), business), 400, "key-invalid");
  CHECK_THAT(too_long.at("detail").get<std::string>(), Catch::Contains("65 bytes; at most 64"));
  CHECK(runs == 0);
  CHECK(memory.size() == 0);
}

TEST_CASE_METHOD(Loop, "async_handle: a duplicate while the first runs gets 409 with Retry-After") {
  int runs = 0;
  const auto slow = [&]() -> net::awaitable<Response> { co_return co_await charge(++runs, 50ms); };
  std::optional<Response> first, duplicate, conflicting;
  const Request request = post(R"("k-4")");
  const Request other = post(R"("k-4")", "{}");
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        first = co_await idem::http::async_handle(store, request, slow);
      },
      net::detached);
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await idem::async::sleep_for(10ms);
        duplicate = co_await idem::http::async_handle(store, request, slow);
        // A conflicting payload is 422 even while the first request is still running.
        conflicting = co_await idem::http::async_handle(store, other, slow);
      },
      net::detached);
  io.run();
  REQUIRE(first);
  REQUIRE(duplicate);
  REQUIRE(conflicting);
  CHECK(*first == created(1));
  problem(*duplicate, 409, "key-in-use");
  CHECK(duplicate->header("Retry-After") == std::optional<std::string>{"1"});
  problem(*conflicting, 422, "key-reused");
  CHECK(runs == 1);

  // Nested, as handle_test does it: the business itself sends the duplicate.
  Policy no_retry_after;
  no_retry_after.retry_after_seconds = 0;
  std::optional<Response> inner;
  const Request nested = post(R"("k-4b")");
  const auto never = [] { return created(0); };
  const auto outer = [&]() -> net::awaitable<Response> {
    inner = co_await idem::http::async_handle(store, nested, never, no_retry_after);
    co_return created(1);
  };
  CHECK(handle(nested, outer, no_retry_after).status == 201);
  REQUIRE(inner);
  CHECK(inner->status == 409);
  CHECK_FALSE(inner->header("Retry-After"));
}

TEST_CASE_METHOD(Loop,
                 "async_handle: a business that throws EffectUnknown answers 503 outcome-unknown, "
                 "and so do its duplicates, without running") {
  int runs = 0;
  const auto timed_out = [&]() -> net::awaitable<Response> {
    ++runs;
    throw idem::EffectUnknown("the acquirer timed out after the capture was sent");
    co_return created(0);
  };
  for (int i = 0; i < 2; ++i) {
    const Response r = handle(post(R"("k-7")"), timed_out);
    problem(r, 503, "outcome-unknown");
    CHECK(r.header("Retry-After") == std::optional<std::string>{"60"});
  }
  CHECK(runs == 1);
  CHECK(memory.find(idem::Key{"http", "k-7"})->status == idem::Status::outcome_unknown);
}

TEST_CASE_METHOD(Loop, "async_handle: a worker that died keeps 409 until its lease runs out") {
  Policy policy;
  policy.claim.lease = std::chrono::seconds{10};
  const auto crashed = memory.claim(
      idem::Key{"http", "k-5"}, idem::http::request_fingerprint(post(R"("k-5")")), policy.claim);
  REQUIRE(crashed.verdict == idem::Verdict::acquired);
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  problem(handle(post(R"("k-5")"), business, policy), 409, "key-in-use");
  clock.advance(std::chrono::seconds{11});
  CHECK(handle(post(R"("k-5")"), business, policy).status == 201);
  CHECK(runs == 1);
}

TEST_CASE_METHOD(Loop,
                 "async_handle: 5xx and transient 4xx are never stored - a retry runs again") {
  for (const int status : {500, 503, 408, 425, 429}) {
    INFO("status " << status);
    const std::string key = "t-" + std::to_string(status);
    int runs = 0;
    const auto failing = [&]() -> net::awaitable<Response> {
      ++runs;
      co_await idem::async::sleep_for(1ms);
      co_return Response{status, {{"Content-Type", "text/plain"}}, "try later"};
    };
    CHECK(handle(post(key), failing).status == status);
    CHECK(handle(post(key), failing).status == status);
    CHECK(runs == 2);
    const auto record = memory.find(idem::Key{"http", key});
    REQUIRE(record);
    CHECK(record->status == idem::Status::failed);
    CHECK(record->retryable);
    CHECK(handle(post(key), [&] { return created(++runs); }).status == 201);
    CHECK(replayed(handle(post(key), [&] { return created(++runs); })));
    CHECK(runs == 3);
  }
}

TEST_CASE_METHOD(Loop,
                 "async_handle: final 4xx are stored and replayed by default, not under "
                 "StoredResponses::successes") {
  int runs = 0;
  const auto declined = [&] {
    ++runs;
    return idem::http::problem_response(
        {"https://example.test/declined", "Card declined", 402, "the issuer declined the card"});
  };
  const Response first = handle(post(R"("d-1")"), declined);
  const Response again = handle(post(R"("d-1")"), declined);
  CHECK(first.status == 402);
  CHECK(again.status == 402);
  CHECK(again.body == first.body);
  CHECK(replayed(again));
  CHECK(runs == 1);
  const auto record = memory.find(idem::Key{"http", "d-1"});
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK_FALSE(record->retryable);

  Policy successes;
  successes.stored = idem::http::StoredResponses::successes;
  CHECK(handle(post(R"("d-2")"), declined, successes).status == 402);
  CHECK(handle(post(R"("d-2")"), declined, successes).status == 402);
  CHECK(runs == 3);
  const auto see_other = [&] {
    ++runs;
    return Response{303, {{"Location", "/payments/pay_9"}}, ""};
  };
  CHECK(handle(post(R"("d-3")"), see_other, successes).status == 303);
  const Response redirect = handle(post(R"("d-3")"), see_other, successes);
  CHECK(replayed(redirect));
  CHECK(redirect.header("Location") == std::optional<std::string>{"/payments/pay_9"});
  CHECK(runs == 4);
}

TEST_CASE_METHOD(Loop,
                 "async_handle: an exception from the business is recorded retryable before it "
                 "propagates, and a retry runs") {
  int runs = 0;
  const auto broken = [&]() -> net::awaitable<Response> {
    ++runs;
    co_await idem::async::sleep_for(1ms);
    throw std::runtime_error("card network down");
  };
  CHECK_THROWS_AS(handle(post(R"("e-1")"), broken), std::runtime_error);
  const auto record = memory.find(idem::Key{"http", "e-1"});
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK(record->retryable);
  CHECK(handle(post(R"("e-1")"), [&] { return created(++runs); }).status == 201);
  CHECK(runs == 2);
  // A status outside 100-599 is the handler's bug: refused, recorded as retryable.
  CHECK_THROWS_AS(handle(post(R"("e-2")"),
                         [] {
                           return Response{42, {}, ""};
                         }),
                  idem::InvalidArgument);
  CHECK(handle(post(R"("e-2")"), [&] { return created(++runs); }).status == 201);
}

TEST_CASE_METHOD(Loop,
                 "async_handle: a request cancelled while the business runs records a retryable "
                 "failure before the call returns") {
  int runs = 0;
  const auto slow = [&]() -> net::awaitable<Response> { co_return co_await charge(++runs, 10s); };
  const Request request = post(R"("c-1")");
  std::optional<idem::Status> right_after;  // read as soon as the cancelled call returned
  const auto timed = [&]() -> net::awaitable<int> {
    net::steady_timer timeout(co_await net::this_coro::executor, 20ms);
    auto winner = co_await (idem::http::async_handle(store, request, slow) ||
                            timeout.async_wait(net::use_awaitable));
    if (const auto r = memory.find(idem::Key{"http", "c-1"})) right_after = r->status;
    co_return static_cast<int>(winner.index());
  };
  const auto start = std::chrono::steady_clock::now();
  CHECK(run(timed()) == 1);  // the timeout won
  CHECK(right_after == idem::Status::failed);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  const auto record = memory.find(idem::Key{"http", "c-1"});
  REQUIRE(record);
  CHECK(record->status == idem::Status::failed);
  CHECK(record->retryable);
  CHECK(handle(request, [&] { return created(++runs); }) == created(2));
}

TEST_CASE_METHOD(Loop, "async_handle: an unstorable response runs once, and retries get the note") {
  const std::string huge(idem::max_snapshot_bytes + 1, 'x');
  int runs = 0;
  const auto big = [&] {
    ++runs;
    return Response{200, {{"Content-Type", "text/plain"}}, huge};
  };
  CHECK(handle(post(R"("big")"), big).body == huge);
  const Response note = handle(post(R"("big")"), big);
  CHECK(replayed(note));
  const json j =
      problem(Response{note.status, {note.headers.front()}, note.body}, 500, "response-unstorable");
  CHECK_THAT(j.at("detail").get<std::string>(), Catch::Contains("ran once"));
  CHECK(runs == 1);
}

TEST_CASE_METHOD(Loop, "async_handle: Policy::replay_header, and records that are not responses") {
  Policy policy;
  policy.replay_header = "X-Idempotency-Replay";
  int runs = 0;
  const auto business = [&] { return created(++runs); };
  CHECK(handle(post(R"("r-1")"), business, policy) == created(1));
  const Response again = handle(post(R"("r-1")"), business, policy);
  CHECK(again.header("X-Idempotency-Replay") == std::optional<std::string>{"true"});
  CHECK_FALSE(again.header("Idempotent-Replayed"));

  Policy bad;
  bad.replay_header = "Content-Type";
  CHECK_THROWS_AS(handle(post(R"("r-2")"), business, bad), idem::InvalidArgument);
  CHECK(runs == 1);

  // A record of the same biz_type written by non-HTTP code is not a response to replay.
  const Request req = post(R"("shared")");
  REQUIRE(
      idem::run_once(memory, idem::Key{"http", "shared"}, idem::http::request_fingerprint(req), [] {
        return json{{"not", "http"}};
      }));
  CHECK_THROWS_AS(handle(req, business), idem::CorruptRecord);
}

TEST_CASE("async_handle: step by step the same answers and records as handle()") {
  struct Step {
    std::string key;  // the Idempotency-Key field, "" for none
    std::string body;
    int status;  // what the business answers when it runs
    Policy policy{};
  };
  const std::string pay = R"({"amount":100,"currency":"EUR"})";
  Policy successes;
  successes.stored = idem::http::StoredResponses::successes;
  Policy renamed;
  renamed.replay_header = "X-Replayed";
  const std::vector<Step> steps = {
      {R"("s-1")", pay, 201},
      {R"("s-1")", pay, 201},
      {"s-1", pay, 201},
      {R"("s-1")", "{}", 201},
      {"", pay, 201},
      {"a b", pay, 201},
      {R"("s-2")", pay, 500},
      {R"("s-2")", pay, 429},
      {R"("s-2")", pay, 201},
      {R"("s-2")", pay, 201},
      {R"("s-3")", pay, 402},
      {R"("s-3")", pay, 201},
      {R"("s-4")", pay, 402, successes},
      {R"("s-4")", pay, 303, successes},
      {R"("s-4")", pay, 303, successes},
      {R"("s-5")", pay, 201, renamed},
      {R"("s-5")", pay, 201, renamed},
      {R"("s-6")", pay, 99},
      {R"("s-6")", pay, 201},
  };

  idem::MemoryStore sync_store;
  idem::MemoryStore async_memory;
  idem::async::InlineStore<idem::MemoryStore> async_store{async_memory};
  net::io_context io;
  int sync_runs = 0;
  int async_runs = 0;
  const auto answer = [](int status, int n) {
    Response r = created(n);
    r.status = status;
    return r;
  };
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    INFO("step " << i << ": key " << step.key << ", business status " << step.status);
    const Request request = post(step.key, step.body);

    std::optional<Response> sync_answer;
    std::string sync_error;
    try {
      sync_answer = idem::http::handle(
          sync_store, request, [&] { return answer(step.status, ++sync_runs); }, step.policy);
    } catch (const std::exception& e) {
      sync_error = e.what();
    }

    std::optional<Response> async_answer;
    std::string async_error;
    const auto business = [&]() -> net::awaitable<Response> {
      co_await idem::async::sleep_for(1ms);
      co_return answer(step.status, ++async_runs);
    };
    net::co_spawn(io, idem::http::async_handle(async_store, request, business, step.policy),
                  [&](std::exception_ptr e, std::optional<Response> r) {
                    if (e) {
                      try {
                        std::rethrow_exception(e);
                      } catch (const std::exception& x) {
                        async_error = x.what();
                      }
                    } else {
                      async_answer = std::move(r);
                    }
                  });
    io.restart();
    io.run();

    CHECK(async_answer == sync_answer);
    CHECK(async_error.empty() == sync_error.empty());
    CHECK(async_runs == sync_runs);
    if (step.key.empty()) continue;
    const std::string id =
        step.key.front() == '"' ? step.key.substr(1, step.key.size() - 2) : step.key;
    const auto sync_record = sync_store.find(idem::Key{step.policy.biz_type, id});
    const auto async_record = async_memory.find(idem::Key{step.policy.biz_type, id});
    REQUIRE(sync_record.has_value() == async_record.has_value());
    if (!sync_record) continue;
    CHECK(async_record->status == sync_record->status);
    CHECK(async_record->retryable == sync_record->retryable);
    CHECK(async_record->snapshot == sync_record->snapshot);
  }
  CHECK(sync_runs == 10);
}

TEST_CASE_METHOD(Loop,
                 "async_handle: 20 coroutines send the same request at once on one loop thread "
                 "- one execution") {
  constexpr int copies = 20;
  int runs = 0;
  const auto slow = [&]() -> net::awaitable<Response> { co_return co_await charge(++runs, 30ms); };
  const Request request = post(R"("race-1")");
  std::vector<Response> answers;
  for (int i = 0; i < copies; ++i) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          answers.push_back(co_await idem::http::async_handle(store, request, slow));
        },
        net::detached);
  }
  io.run();
  REQUIRE(answers.size() == copies);
  int fresh = 0;
  int busy = 0;
  for (const Response& r : answers) {
    if (r == created(1)) ++fresh;
    if (r.status == 409) ++busy;
  }
  CHECK(runs == 1);
  CHECK(fresh == 1);
  CHECK(busy == copies - 1);  // all arrived while the first was running

  // With Policy::claim.wait the duplicates wait on a timer, then replay.
  Policy waiting;
  waiting.claim.wait = 5s;
  const Request second = post(R"("race-2")");
  answers.clear();
  for (int i = 0; i < copies; ++i) {
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
          answers.push_back(co_await idem::http::async_handle(store, second, slow, waiting));
        },
        net::detached);
  }
  io.restart();
  io.run();
  REQUIRE(answers.size() == copies);
  int replays = 0;
  for (const Response& r : answers) {
    CHECK(r.status == 201);
    if (replayed(r)) ++replays;
  }
  CHECK(replays == copies - 1);
  CHECK(runs == 2);
}
