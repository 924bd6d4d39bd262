// The Idempotency-Key field value, an RFC 8941 sf-string or (by default) a bare key: what is
// a key and what is refused.
#include <string>

#include <catch2/catch.hpp>
#include <idem/http/idempotency_key.hpp>

using idem::http::format_idempotency_key;
using idem::http::KeySyntax;
using idem::http::parse_idempotency_key;

namespace {

constexpr KeySyntax both_syntaxes[] = {KeySyntax::quoted_or_bare, KeySyntax::quoted_only};

void refused(const std::string& value, const std::string& reason,
             KeySyntax syntax = KeySyntax::quoted_or_bare) {
  INFO("field value: " << value << ", quoted_only: " << (syntax == KeySyntax::quoted_only));
  CHECK_THROWS_WITH(parse_idempotency_key(value, syntax), Catch::Contains(reason));
  CHECK_THROWS_AS(parse_idempotency_key(value, syntax), idem::InvalidArgument);
}

}  // namespace

TEST_CASE("idempotency key: well-formed sf-strings parse to their content") {
  for (const KeySyntax syntax : both_syntaxes)
    CHECK(parse_idempotency_key(R"( "k-1";v=2 )", syntax) == "k-1");
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

TEST_CASE("idempotency key: a malformed quoted value is refused with where and why") {
  for (const KeySyntax syntax : both_syntaxes) {
    const auto no = [&](const std::string& value, const std::string& reason) {
      refused(value, reason, syntax);
    };
    no("", "the field is empty");
    no("   ", "the field is empty");
    no(" \t ", "the field is empty");
    no(R"("")", "must not be an empty string");
    no(R"("open)", "no closing");
    no(R"("a\")", "no closing");
    no(R"("a\x")", "backslash may only escape");
    no(R"("a\n")", "backslash may only escape");
    no("\"ctl\x01\"", "printable ASCII");
    no("\"tab\tin\"", "printable ASCII");
    no("\"del\x7f\"", "printable ASCII");
    no("\"caf\xc3\xa9\"", "printable ASCII");  // UTF-8 is not an sf-string
    no(R"("a", "b")", "found a list");         // the header sent twice, combined
    no(R"("a","a")", "found a list");
    no(R"("a", b)", "found a list");
    no(R"("a" x)", "unexpected characters");
    no(R"("a"x)", "unexpected characters");
    no(R"("a" ;p=1)", "unexpected characters");  // no space before ';'
    no(R"("a";)", "parameter name");
    no(R"("a";P=1)", "parameter name");
    no(R"("a";1=1)", "parameter name");
    no(R"("a";p=)", "expected a value");
    no(R"("a";p=1234567890123456)", "at most 15 digits");
    no(R"("a";p=1.2345)", "a decimal");
    no(R"("a";p=1234567890123.1)", "a decimal");
    no(R"("a";p=1.)", "a decimal");
    no(R"("a";p=-)", "needs a digit");
    no(R"("a";p=?2)", "boolean");
    no(R"("a";p=:ab!:)", "base64");
    no(R"("a";p=:abc)", "no closing ':'");
    no(R"("a";p="open)", "no closing");
    no(R"("a";p=@)", "needs a digit");
    no(R"("a";p=%"%C3")", "lower-case %xx");
    no(R"("a";p=%"%c")", "lower-case %xx");
    no(R"("a";p=%"open)", "no closing");
    no(R"("a";p=%x)", "starts with %\"");
  }
}

TEST_CASE("idempotency key: a bare key is the same key as its quoted form") {
  for (const std::string key : {
           "018f2e4c-7b1a-4c2e-9d1a-2b3c4d5e6f70",  // UUID: starts with a digit, no sf-token
           "01ARZ3NDEKTSV4RRFFQ69G5FAV",            // ULID
           "q83vEjRWeJA=",
           "ab+/cd==",  // base64, with its padding
           "aGk_LXo-",  // base64url
           "order:A-1001",
           "v1.2~x",
           "a",
           "42",
           "-5",
           ":aGk=:",
           "=",
       }) {
    INFO("key: " << key);
    CHECK(parse_idempotency_key(key) == key);
    CHECK(parse_idempotency_key(key) == parse_idempotency_key(format_idempotency_key(key)));
    CHECK(parse_idempotency_key("  " + key + "\t ") == key);  // OWS trimmed
  }
  CHECK(parse_idempotency_key("8e03978e-40d5", KeySyntax::quoted_or_bare) == "8e03978e-40d5");
}

TEST_CASE("idempotency key: exactly letters, digits and -._~:+/= may go without quotes") {
  const std::string allowed =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:+/=";
  for (int c = 0; c < 256; ++c) {
    const std::string key = std::string{"a"} + static_cast<char>(c) + "b";
    INFO("byte " << c);
    if (allowed.find(static_cast<char>(c)) != std::string::npos) {
      CHECK(parse_idempotency_key(key) == key);
      CHECK(idem::http::is_bare_key_char(static_cast<char>(c)));
    } else {
      CHECK_THROWS_AS(parse_idempotency_key(key), idem::InvalidArgument);
      CHECK_FALSE(idem::http::is_bare_key_char(static_cast<char>(c)));
    }
  }
}

TEST_CASE("idempotency key: a malformed bare key is refused with where and why") {
  refused("abc def", "cannot hold spaces");
  refused("abc\tdef", "printable ASCII");  // no key holds a tab, quoted or not
  refused("abc  \"def\"", "cannot hold spaces");
  refused("k-1;v=2", "parameters may only follow a key in double quotes");
  refused("a,b", "found a list");
  refused("abc, def", "found a list");
  refused("abc , def", "found a list");
  refused("abc, \"abc\"", "found a list");
  refused("caf\xc3\xa9", "printable ASCII");
  refused("ctl\x01", "printable ASCII");
  refused("del\x7f", "printable ASCII");
  refused("?1", "'?' cannot appear in a key without quotes");
  refused("'single'", "\"'\" cannot appear");
  refused("@1659578233", "'@' cannot appear");
  refused(R"(%"display")", "'%' cannot appear");
  refused("*", "'*' cannot appear");
  refused(R"(a"b")", "'\"' cannot appear");
  refused(R"(a\b)", "'\\' cannot appear");
  for (const char* c : {"!", "#", "$", "&", "(", ")", "<", ">", "[", "]", "{", "}", "|", "^", "`"})
    refused(std::string{"a"} + c + "b", "cannot appear in a key without quotes");
  // The offset points at the first byte that does not belong.
  refused("abc def", "at byte 3");
  refused("ab;c", "at byte 2");
  refused("?1", "at byte 0");
}

TEST_CASE("idempotency key: KeySyntax::quoted_only refuses every unquoted value") {
  for (const std::string value :
       {"8e03978e-40d5", "018f2e4c-7b1a-4c2e-9d1a-2b3c4d5e6f70", "k-1", "42", "?1",
        ":aGk=:", "'single'", "@1659578233", R"(%"display")", "k-1;v=2"}) {
    refused(value, "not quoted", KeySyntax::quoted_only);
    refused(value, "accepts only the quoted form", KeySyntax::quoted_only);
  }
  CHECK(parse_idempotency_key(R"("k-1";v=2)", KeySyntax::quoted_only) == "k-1");
  CHECK(parse_idempotency_key(R"(  "k-1" )", KeySyntax::quoted_only) == "k-1");
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
    for (const KeySyntax syntax : both_syntaxes)
      CHECK(parse_idempotency_key(format_idempotency_key(key), syntax) == key);
  }
  CHECK_THROWS_AS(format_idempotency_key(""), idem::InvalidArgument);
  CHECK_THROWS_AS(format_idempotency_key("line\nbreak"), idem::InvalidArgument);
  CHECK_THROWS_AS(format_idempotency_key("caf\xc3\xa9"), idem::InvalidArgument);
}
