// The Idempotency-Key field value as an RFC 8941 sf-string: what is a key and what is refused.
#include <string>

#include <catch2/catch.hpp>
#include <idem/http/idempotency_key.hpp>

using idem::http::format_idempotency_key;
using idem::http::parse_idempotency_key;

TEST_CASE("idempotency key: well-formed sf-strings parse to their content") {
  CHECK(parse_idempotency_key(R"("8e03978e-40d5-43e8-bc93-6894a57f9324")") ==
        "8e03978e-40d5-43e8-bc93-6894a57f9324");
  CHECK(parse_idempotency_key(R"("a")") == "a");
  CHECK(parse_idempotency_key(R"(   "spaced"   )") == "spaced");
  CHECK(parse_idempotency_key("\t\"tabbed\" \t") == "tabbed");  // OWS left by some libraries
  CHECK(parse_idempotency_key(R"("with inner space")") == "with inner space");
  CHECK(parse_idempotency_key(R"("q\"uote")") == "q\"uote");
  CHECK(parse_idempotency_key(R"("back\\slash")") == "back\\slash");
  CHECK(parse_idempotency_key(R"("!#$%&'()*+,-./:;<=>?@[]^_`{|}~")") ==
        "!#$%&'()*+,-./:;<=>?@[]^_`{|}~");
}

TEST_CASE("idempotency key: parameters of every bare-item type are accepted and ignored") {
  CHECK(parse_idempotency_key(R"("k";a)") == "k");
  CHECK(parse_idempotency_key(R"("k";a=1;b=-2;c=3.25;d="x\"y";e=tok/en:1;f=:aGVsbG8=:;g=?0)") ==
        "k");
  CHECK(parse_idempotency_key(R"("k";  a=?1;*b=1;c_d.e-f*=2)") == "k");
  CHECK(parse_idempotency_key(R"("k";a=123456789012345)") == "k");
  CHECK(parse_idempotency_key(R"("k";t=@1659578233;d=%"caf%c3%a9")") == "k");  // RFC 9651 types
  CHECK(parse_idempotency_key(R"("k";a=123456789012.123)") == "k");
}

TEST_CASE("idempotency key: anything but one sf-string is refused with where and why") {
  const auto refused = [](const std::string& value, const std::string& reason) {
    INFO("field value: " << value);
    CHECK_THROWS_WITH(parse_idempotency_key(value), Catch::Contains(reason));
    CHECK_THROWS_AS(parse_idempotency_key(value), idem::InvalidArgument);
  };
  refused("", "the field is empty");
  refused("   ", "the field is empty");
  refused("8e03978e-40d5", "not quoted");  // a token
  refused("42", "not quoted");
  refused("?1", "not quoted");
  refused(":aGk=:", "not quoted");
  refused("'single'", "not quoted");
  refused(R"("")", "must not be an empty string");
  refused(R"("open)", "no closing");
  refused(R"("a\")", "no closing");
  refused(R"("a\x")", "backslash may only escape");
  refused(R"("a\n")", "backslash may only escape");
  refused("\"ctl\x01\"", "printable ASCII");
  refused("\"tab\tin\"", "printable ASCII");
  refused("\"del\x7f\"", "printable ASCII");
  refused("\"caf\xc3\xa9\"", "printable ASCII");  // UTF-8 is not an sf-string
  refused(R"("a", "b")", "found a list");         // the header sent twice, combined
  refused(R"("a","a")", "found a list");
  refused(R"("a" x)", "unexpected characters");
  refused(R"("a"x)", "unexpected characters");
  refused(R"("a" ;p=1)", "unexpected characters");  // no space before ';'
  refused(R"("a";)", "parameter name");
  refused(R"("a";P=1)", "parameter name");
  refused(R"("a";1=1)", "parameter name");
  refused(R"("a";p=)", "expected a value");
  refused(R"("a";p=1234567890123456)", "at most 15 digits");
  refused(R"("a";p=1.2345)", "a decimal");
  refused(R"("a";p=1234567890123.1)", "a decimal");
  refused(R"("a";p=1.)", "a decimal");
  refused(R"("a";p=-)", "needs a digit");
  refused(R"("a";p=?2)", "boolean");
  refused(R"("a";p=:ab!:)", "base64");
  refused(R"("a";p=:abc)", "no closing ':'");
  refused(R"("a";p="open)", "no closing");
  refused(R"("a";p=@)", "needs a digit");
  refused(R"("a";p=%"%C3")", "lower-case %xx");
  refused(R"("a";p=%"%c")", "lower-case %xx");
  refused(R"("a";p=%"open)", "no closing");
  refused(R"("a";p=%x)", "starts with %\"");
  refused("@1659578233", "not quoted");
  refused(R"(%"display")", "not quoted");
}

TEST_CASE("idempotency key: the message names the byte offset and shows the value safely") {
  try {
    parse_idempotency_key("\"ab\x01\"");
    FAIL("no exception");
  } catch (const idem::InvalidArgument& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("at byte 3"));
    CHECK_THAT(what, Catch::Contains("\\x01"));  // control bytes are escaped in the message
  }
}

TEST_CASE("idempotency key: format writes an sf-string that parses back") {
  CHECK(format_idempotency_key("abc") == R"("abc")");
  CHECK(format_idempotency_key(R"(a"b\c)") == R"("a\"b\\c")");
  for (const std::string key :
       {"x", "018f2e4c-7b1a-7c3e-9a4b-2f1d6c8e0a55", R"(\"\")", " lead", "trail ", "~!@#$%^&*()"}) {
    CHECK(parse_idempotency_key(format_idempotency_key(key)) == key);
  }
  CHECK_THROWS_AS(format_idempotency_key(""), idem::InvalidArgument);
  CHECK_THROWS_AS(format_idempotency_key("line\nbreak"), idem::InvalidArgument);
  CHECK_THROWS_AS(format_idempotency_key("caf\xc3\xa9"), idem::InvalidArgument);
}
