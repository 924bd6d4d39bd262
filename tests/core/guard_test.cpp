// IdempotencyGuard and run_once semantics beyond the store contract (which conformance covers).
#include <sys/wait.h>
#include <unistd.h>
#include <optional>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>
#include <idem/detail/token.hpp>
#include <idem/idem.hpp>

using nlohmann::json;

namespace {

struct Receipt {
  std::string trade_no;
  long amount = 0;
  friend bool operator==(const Receipt&, const Receipt&) = default;
};
void to_json(json& j, const Receipt& r) {
  j = json{{"trade_no", r.trade_no}, {"amount", r.amount}};
}
void from_json(const json& j, Receipt& r) {
  j.at("trade_no").get_to(r.trade_no);
  j.at("amount").get_to(r.amount);
}

struct GuardFixture {
  idem::ManualClock clock;
  idem::MemoryStore store{[this] { return clock.now(); }};
};

}  // namespace

TEST_CASE_METHOD(GuardFixture, "guard: acquired, commit, then duplicates replay typed responses") {
  const idem::Key key{"PAY", "T-1"};
  const auto fp = idem::fingerprint(json{{"amount", 299}});
  {
    idem::IdempotencyGuard guard{store, key, fp};
    REQUIRE(guard.acquired());
    guard.commit(Receipt{"T-1", 299});
    CHECK(guard.record().status == idem::Status::succeeded);
    CHECK_THROWS_AS(guard.commit(Receipt{"T-1", 1}), idem::UsageError);
    CHECK_THROWS_AS(guard.fail(json{}, true), idem::UsageError);
    CHECK_THROWS_AS(guard.replay<Receipt>(), idem::UsageError);
  }
  idem::IdempotencyGuard dup{store, key, fp};
  REQUIRE(dup.verdict() == idem::Verdict::replayed);
  const idem::Outcome<Receipt> out = dup.replay<Receipt>();
  REQUIRE(out);
  CHECK(out.value() == Receipt{"T-1", 299});
  CHECK_FALSE(out.failed());
  CHECK_THROWS_AS(out.error(), idem::BadOutcomeAccess);
  CHECK_THROWS_AS(dup.commit(Receipt{}), idem::UsageError);
  // A stored response read as the wrong type is reported, not invented.
  CHECK_THROWS_AS(dup.replay<int>(), idem::CorruptRecord);
}

TEST_CASE_METHOD(GuardFixture,
                 "guard: destroyed without commit records a retryable failure, never throws") {
  const idem::Key key{"PAY", "T-2"};
  {
    idem::IdempotencyGuard guard{store, key, ""};
    REQUIRE(guard.acquired());
  }
  auto r = store.find(key);
  REQUIRE(r);
  CHECK(r->status == idem::Status::failed);
  CHECK(r->retryable);
  CHECK(json::parse(r->snapshot)["error"] == "idem.abandoned");

  // An exception through the guard's scope does the same.
  try {
    idem::IdempotencyGuard guard{store, key, ""};
    REQUIRE(guard.acquired());
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  r = store.find(key);
  CHECK(r->status == idem::Status::failed);
  CHECK(r->attempts == 2);

  // The record disappearing under the guard (purged) must not make the destructor throw.
  const idem::Key key2{"PAY", "T-3"};
  {
    idem::IdempotencyGuard guard{
        store, key2, "",
        idem::Options{.lease = std::chrono::seconds{1}, .ttl = std::chrono::seconds{1}}};
    clock.advance(std::chrono::seconds{2});
    CHECK(store.purge_expired(10, 1) >= 1);
  }
  CHECK_FALSE(store.find(key2));
}

TEST_CASE_METHOD(GuardFixture, "guard: fail() records retryable or permanent failures") {
  const idem::Key key{"PAY", "T-4"};
  {
    idem::IdempotencyGuard guard{store, key, ""};
    guard.fail(json{{"error", "declined"}}, false);
  }
  idem::IdempotencyGuard dup{store, key, ""};
  REQUIRE(dup.verdict() == idem::Verdict::replayed);
  const auto out = dup.replay<Receipt>();
  CHECK_FALSE(out);
  REQUIRE(out.failed());
  CHECK(out.error()["error"] == "declined");
  CHECK_THROWS_AS(out.value(), idem::BadOutcomeAccess);
}

TEST_CASE_METHOD(GuardFixture, "guard: a response that cannot be stored leaves the claim open") {
  const idem::Key key{"PAY", "T-5"};
  idem::IdempotencyGuard guard{store, key, ""};
  CHECK_THROWS_AS(guard.commit(std::string("\xff not utf-8")), idem::InvalidArgument);
  CHECK_THROWS_AS(guard.commit(std::string(idem::max_snapshot_bytes, 'x')), idem::InvalidArgument);
  CHECK(store.find(key)->status == idem::Status::processing);
  guard.commit(std::string("fine"));
  CHECK(store.find(key)->status == idem::Status::succeeded);
}

TEST_CASE_METHOD(
    GuardFixture,
    "run_once: an unstorable response after the business ran is recorded as permanent") {
  const idem::Key key{"PAY", "T-6"};
  int runs = 0;
  CHECK_THROWS_AS(idem::run_once(store, key, "",
                                 [&] {
                                   ++runs;
                                   return std::string("\xc3\x28");
                                 }),
                  idem::InvalidArgument);
  const auto again = idem::run_once(store, key, "", [&] {
    ++runs;
    return std::string("ok");
  });
  CHECK(runs == 1);
  CHECK(again.verdict() == idem::Verdict::replayed);
  REQUIRE(again.failed());
  CHECK(again.error()["error"] == "idem.unstorable_response");
}

// A to_json that throws something other than a JSON error (here std::bad_optional_access from an
// empty optional) is as unstorable as invalid UTF-8: recorded as permanent, never run again.
namespace {

struct Shipment {
  std::optional<std::string> carrier;
};
void to_json(json& j, const Shipment& s) {
  j = json{{"carrier", s.carrier.value()}};  // throws for an empty optional
}
void from_json(const json& j, Shipment& s) {
  s.carrier = j.at("carrier").get<std::string>();
}

}  // namespace

TEST_CASE_METHOD(GuardFixture,
                 "run_once: a to_json that throws any exception is an unstorable response, never "
                 "a second run") {
  const idem::Key key{"PAY", "T-6b"};
  int runs = 0;
  auto ship = [&] {
    ++runs;
    return Shipment{};
  };
  CHECK_THROWS_AS(idem::run_once(store, key, "", ship), idem::InvalidArgument);
  const auto stored = store.find(key);
  REQUIRE(stored);
  CHECK(stored->status == idem::Status::failed);
  CHECK_FALSE(stored->retryable);
  const auto again = idem::run_once(store, key, "", ship);
  CHECK(runs == 1);
  CHECK(again.verdict() == idem::Verdict::replayed);
  REQUIRE(again.failed());
  CHECK(again.error()["error"] == "idem.unstorable_response");
  // The guard alone: commit() reports it as InvalidArgument and the claim stays open.
  const idem::Key other{"PAY", "T-6c"};
  idem::IdempotencyGuard guard{store, other, ""};
  CHECK_THROWS_AS(guard.commit(Shipment{}), idem::InvalidArgument);
  CHECK(store.find(other)->status == idem::Status::processing);
  guard.commit(Shipment{"post"});
  CHECK(store.find(other)->status == idem::Status::succeeded);
}

TEST_CASE_METHOD(GuardFixture, "run_once: returns values of any serialisable type") {
  const idem::Key key{"ORDER", "u1:req-1"};
  auto first = idem::run_once(store, key, "", [] { return Receipt{"O-1", 5}; });
  auto second = idem::run_once(store, key, "", [] { return Receipt{"O-2", 6}; });
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first.acquired());
  CHECK(second.replayed());
  CHECK(second.value() == first.value());
  CHECK(second.record()->status == idem::Status::succeeded);
}

TEST_CASE("MemoryStore rejects an empty clock") {
  CHECK_THROWS_AS(idem::MemoryStore(std::function<idem::TimePoint()>{}), idem::InvalidArgument);
}

TEST_CASE("the error hierarchy has one root") {
  CHECK_THROWS_AS(throw idem::LeaseLost("x"), idem::Error);
  CHECK_THROWS_AS(throw idem::CorruptRecord("x"), idem::StoreError);
  CHECK_THROWS_AS(throw idem::BadOutcomeAccess("x"), idem::UsageError);
  CHECK_THROWS_AS(throw idem::PermanentFailure(json{{"e", 1}}), idem::Error);
  const idem::StoreError e("lost connection", true,
                           {2013, "HY000", "Lost connection to server", false});
  CHECK(e.retryable());
  CHECK(e.diagnostics().code == 2013);
  CHECK_FALSE(e.diagnostics().from_server);
  CHECK(std::string(e.what()) == "lost connection");
  CHECK(e.diagnostics().message == "Lost connection to server");
}

TEST_CASE("owner tokens differ between a parent and its forked children") {
  const std::string before = idem::detail::new_owner_token();  // the engine exists before fork
  (void)before;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const std::string token = idem::detail::new_owner_token();
    const auto written = ::write(fds[1], token.data(), token.size());
    ::_exit(written == static_cast<ssize_t>(token.size()) ? 0 : 1);
  }
  const std::string mine = idem::detail::new_owner_token();
  std::string theirs(32, '\0');
  const auto got = ::read(fds[0], theirs.data(), theirs.size());
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(fds[0]);
  ::close(fds[1]);
  REQUIRE(got == 32);
  CHECK(WIFEXITED(status));
  CHECK(theirs != mine);
}
