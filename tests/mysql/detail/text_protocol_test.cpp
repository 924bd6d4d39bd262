// The borrowed-handle path without a server: how inline_params writes a statement's values
// into its SQL text.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "idem/errors.hpp"
#include "idem/mysql/detail/text_protocol.hpp"

using idem::mysql::Param;
using namespace std::chrono_literals;

namespace {

std::string inlined(const std::string& sql, const std::vector<Param>& params,
                    bool backslash_escapes = true) {
  return idem::mysql::detail::inline_params(sql, params.data(), params.size(), backslash_escapes);
}

}  // namespace

TEST_CASE("inline_params writes numbers, NULL, text and blobs as literals") {
  CHECK(inlined("SELECT ?, ?, ?", {std::int64_t{-42}, std::uint64_t{18446744073709551615u},
                                   nullptr}) == "SELECT -42, 18446744073709551615, NULL");
  CHECK(inlined("SELECT ?", {true}) == "SELECT 1");
  // Text and bytes as hex, whatever they hold: quotes, backslashes, NUL, non-ASCII.
  const std::string bytes("a'b\\c\"d\0e?`\xff", 12);
  CHECK(inlined("SELECT ?, ?", {Param::blob(bytes), "x"}) ==
        "SELECT X'6127625C63226400653F60FF', X'78'");
  CHECK(inlined("SELECT ?", {""}) == "SELECT X''");
  CHECK(inlined("SELECT 1", {}) == "SELECT 1");
}

TEST_CASE("inline_params writes a time as a TIMESTAMP literal to the millisecond") {
  const idem::TimePoint t{std::chrono::sys_days{std::chrono::year{2026} / 12 / 1} + 1h + 2min + 3s +
                          4ms};
  CHECK(inlined("UPDATE t SET a = ?", {Param::time(t)}) ==
        "UPDATE t SET a = TIMESTAMP'2026-12-01 01:02:03.004'");
  const idem::TimePoint epoch{};
  CHECK(inlined("SELECT ?", {Param::time(epoch - 1ms)}) ==
        "SELECT TIMESTAMP'1969-12-31 23:59:59.999'");
}

TEST_CASE("inline_params leaves a ? inside quotes alone") {
  const std::vector<Param> one{7};
  CHECK(inlined("SELECT '?', \"?\", `?`, ?", one) == "SELECT '?', \"?\", `?`, 7");
  CHECK(inlined("SELECT 'it''s?', ?", one) == "SELECT 'it''s?', 7");  // a doubled quote
  CHECK(inlined("SELECT \"a\"\"?\", ?", one) == "SELECT \"a\"\"?\", 7");
}

TEST_CASE("inline_params reads backslashes in quotes as the session's sql_mode does") {
  const std::vector<Param> one{7};
  // With backslash escapes (the default sql_mode), \' does not close the string.
  CHECK(inlined(R"(SELECT 'a\'?', ?)", one) == R"(SELECT 'a\'?', 7)");
  CHECK(inlined(R"(SELECT "a\"?", ?)", one) == R"(SELECT "a\"?", 7)");
  CHECK(inlined(R"(SELECT 'a\\', ?)", one) == R"(SELECT 'a\\', 7)");
  // In backticks a backslash is always an ordinary character.
  CHECK(inlined(R"(SELECT `a\`, ?)", one) == R"(SELECT `a\`, 7)");
  // NO_BACKSLASH_ESCAPES: a backslash is an ordinary character, the quote closes.
  CHECK(inlined(R"(SELECT 'a\', ?)", one, false) == R"(SELECT 'a\', 7)");
  CHECK_THROWS_AS(inlined(R"(SELECT 'a\', ?)", one, true), idem::UsageError);  // ? is quoted
}

TEST_CASE("inline_params refuses a parameter count that does not match the placeholders") {
  CHECK_THROWS_AS(inlined("SELECT ?, ?", {1}), idem::UsageError);
  CHECK_THROWS_AS(inlined("SELECT ?", {1, 2}), idem::UsageError);
  CHECK_THROWS_AS(inlined("SELECT '?'", {1}), idem::UsageError);
  CHECK_THROWS_WITH(inlined("SELECT ?, ?", {1}),
                    Catch::Contains("statement takes 2 parameters, 1 given"));
}
