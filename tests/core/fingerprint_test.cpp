#include <string>

#include <catch2/catch.hpp>
#include <idem/fingerprint.hpp>
#include <nlohmann/json.hpp>

using nlohmann::json;

TEST_CASE("fingerprint is SHA-256 hex of the bytes") {
  // Known answers (FIPS 180-2 examples).
  CHECK(idem::fingerprint(std::string_view{""}) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(idem::fingerprint("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(idem::fingerprint(std::string{"abc"}) == idem::fingerprint("abc"));
  CHECK(idem::fingerprint("abc").size() == 64);
}

TEST_CASE("JSON fingerprints ignore member order and whitespace") {
  const json a = json::parse(R"({"a":1,"b":2})");
  const json b = json::parse(R"({ "b" : 2, "a" : 1 })");
  CHECK(idem::fingerprint(a) == idem::fingerprint(b));
  CHECK(idem::canonical_json(b) == R"({"a":1,"b":2})");

  const json nested1 = json::parse(R"({"z":{"y":[1,{"b":true,"a":null}],"x":"s"},"a":[]})");
  const json nested2 = json::parse(R"({"a":[],"z":{"x":"s","y":[1,{"a":null,"b":true}]}})");
  CHECK(idem::fingerprint(nested1) == idem::fingerprint(nested2));
}

TEST_CASE("JSON fingerprints tell different payloads apart") {
  CHECK(idem::fingerprint(json{{"amount", 299}}) != idem::fingerprint(json{{"amount", 2990}}));
  CHECK(idem::fingerprint(json::array({1, 2})) !=
        idem::fingerprint(json::array({2, 1})));  // order matters in arrays
  CHECK(idem::fingerprint(json{{"a", "1"}}) != idem::fingerprint(json{{"a", 1}}));
  CHECK(idem::fingerprint(json{{"A", 1}}) != idem::fingerprint(json{{"a", 1}}));
}

TEST_CASE("integral floats canonicalise as integers") {
  CHECK(idem::canonical_json(json::parse(R"({"n":1.0})")) == R"({"n":1})");
  CHECK(idem::fingerprint(json::parse("1.0")) == idem::fingerprint(json::parse("1")));
  CHECK(idem::fingerprint(json::parse("-0.0")) == idem::fingerprint(json::parse("0")));
  CHECK(idem::fingerprint(json::parse("1.5")) != idem::fingerprint(json::parse("1")));
  CHECK(idem::canonical_json(json::parse("1e300")) == "1e+300");
}

TEST_CASE("a JSON string that is not UTF-8 is an InvalidArgument") {
  json bad = {{"name", std::string("\xff\xfe")}};
  CHECK_THROWS_AS(idem::fingerprint(bad), idem::InvalidArgument);
  CHECK_THROWS_AS(idem::canonical_json(bad), idem::InvalidArgument);
}
