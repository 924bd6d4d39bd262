// idem::Outcome<T>: exactly one of a value, an error or neither; a default-constructed one (what
// Asio hands a completion handler beside an exception) holds nothing and says "retry later".

#include <catch2/catch.hpp>

#include <string>

#include <idem/outcome.hpp>

TEST_CASE("outcome: a default-constructed outcome holds nothing and answers in_progress") {
  const idem::Outcome<std::string> none;
  CHECK_FALSE(none);
  CHECK_FALSE(none.has_value());
  CHECK_FALSE(none.failed());
  CHECK_FALSE(none.acquired());
  CHECK_FALSE(none.replayed());
  CHECK(none.verdict() == idem::Verdict::in_progress);
  CHECK_FALSE(none.record().has_value());
  CHECK_THROWS_AS(none.value(), idem::BadOutcomeAccess);
  CHECK_THROWS_AS(none.error(), idem::BadOutcomeAccess);
}

TEST_CASE("outcome: a value, an error, or neither - and value() never answers a failure") {
  const auto ran = idem::Outcome<int>::success(idem::Verdict::acquired, 7);
  CHECK(ran);
  CHECK(ran.value() == 7);
  CHECK_FALSE(ran.failed());
  const auto refused = idem::Outcome<int>::failure(idem::Verdict::replayed, {{"code", "declined"}});
  CHECK_FALSE(refused);
  CHECK(refused.failed());
  CHECK(refused.error()["code"] == "declined");
  CHECK_THROWS_AS(refused.value(), idem::BadOutcomeAccess);
  const auto busy = idem::Outcome<int>::none(idem::Verdict::in_progress);
  CHECK_FALSE(busy);
  CHECK_FALSE(busy.failed());
}
