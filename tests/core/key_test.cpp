#include <string>

#include <catch2/catch.hpp>
#include <idem/key.hpp>
#include <idem/options.hpp>

using Catch::Matchers::Contains;

TEST_CASE("Key accepts the documented alphabet and lengths") {
  CHECK_NOTHROW(idem::Key("PAY", "x"));
  CHECK_NOTHROW(idem::Key("order.create-v2_X", "u42:0190f1c6-7a3b-7cc0-9a51-3f1e2d4c5b6a"));
  CHECK_NOTHROW(idem::Key(std::string(32, 'b'), std::string(64, 'i')));
  CHECK_NOTHROW(idem::Key("PAY", "单号-2026-11-30"));         // multi-byte UTF-8
  CHECK_NOTHROW(idem::Key("PAY", "emoji-\xf0\x9f\x92\xb3"));  // 4-byte sequence
  CHECK_NOTHROW(idem::Key("PAY", "with space and 'quotes'"));
}

TEST_CASE("Key rejects bad biz_types with a message naming the field and rule") {
  for (const std::string& bad :
       {std::string{}, std::string(33, 'b'), std::string{"PAY ORDER"}, std::string{"PAY/ORDER"},
        std::string{"支付"}, std::string{"a\nb"}}) {
    INFO("biz_type '" << bad << "'");
    CHECK_THROWS_AS(idem::Key(bad, "x"), idem::InvalidArgument);
    CHECK_THROWS_WITH(idem::Key(bad, "x"), Contains("biz_type"));
  }
}

TEST_CASE("Key rejects bad ids: length, UTF-8, control characters") {
  const std::string bad_ids[] = {
      "",
      std::string(65, 'i'),
      std::string(22, 'i') + "单号单号单号单号单号单号单号",  // 22 + 42 = 64 bytes is fine ...
      std::string("nul\0byte", 8),
      "tab\there",
      "new\nline",
      "del\x7f",
      "c1-\xc2\x85",       // U+0085 NEXT LINE, a C1 control
      "\xff",              // never valid
      "\xc0\xaf",          // overlong '/'
      "\xe0\x80\xaf",      // overlong
      "\xed\xa0\x80",      // UTF-16 surrogate
      "\xf4\x90\x80\x80",  // above U+10FFFF
      "trunc\xe4\xb8",     // truncated sequence
      "\x80lead",          // stray continuation byte
  };
  int index = 0;
  for (const auto& id : bad_ids) {
    INFO("case " << index);
    if (index == 2) {
      CHECK_NOTHROW(idem::Key("PAY", id));
      CHECK_THROWS_AS(idem::Key("PAY", id + "i"), idem::InvalidArgument);
    } else {
      CHECK_THROWS_AS(idem::Key("PAY", id), idem::InvalidArgument);
      CHECK_THROWS_WITH(idem::Key("PAY", id), Contains("id"));
    }
    ++index;
  }
}

TEST_CASE("Keys compare byte for byte") {
  CHECK(idem::Key("PAY", "abc") != idem::Key("PAY", "ABC"));
  CHECK(idem::Key("PAY", "a") != idem::Key("PAY", "a "));
  CHECK(idem::Key("PAY", "a") != idem::Key("REFUND", "a"));
  CHECK(idem::Key("PAY", "a") == idem::Key("PAY", "a"));
  CHECK(std::hash<idem::Key>{}(idem::Key("PAY", "a")) ==
        std::hash<idem::Key>{}(idem::Key("PAY", "a")));
}

TEST_CASE("compose_id joins parts unambiguously and fails clearly") {
  CHECK(idem::compose_id({"u42", "0190f1c6-7a3b-7cc0-9a51-3f1e2d4c5b6a"}) ==
        "u42:0190f1c6-7a3b-7cc0-9a51-3f1e2d4c5b6a");
  CHECK(idem::compose_id({"solo"}) == "solo");
  CHECK_THROWS_AS(idem::compose_id({}), idem::InvalidArgument);
  CHECK_THROWS_WITH(idem::compose_id({"a", ""}), Contains("part 1 is empty"));
  CHECK_THROWS_WITH(idem::compose_id({"a:b", "c"}), Contains("separator"));
  CHECK_THROWS_WITH(idem::compose_id({std::string(40, 'u'), std::string(40, 'r')}),
                    Contains("81 bytes"));
  CHECK_THROWS_AS(idem::compose_id({"a", "b\x01"}), idem::InvalidArgument);
}

TEST_CASE("Options are validated") {
  CHECK_NOTHROW(idem::validate(idem::Options{}));
  CHECK_NOTHROW(idem::validate(
      idem::Options{.lease = std::chrono::seconds{5}, .ttl = std::chrono::seconds{5}}));
  CHECK_THROWS_WITH(idem::validate(idem::Options{.lease = idem::Duration{0}}), Contains("lease"));
  CHECK_THROWS_WITH(idem::validate(idem::Options{.lease = idem::Duration{-5}}), Contains("lease"));
  CHECK_THROWS_WITH(idem::validate(idem::Options{.ttl = idem::Duration{-5}}), Contains("ttl"));
  CHECK_NOTHROW(idem::validate(idem::Options{.ttl = idem::max_ttl}));
  CHECK_THROWS_WITH(idem::validate(idem::Options{.ttl = idem::max_ttl + idem::Duration{1}}),
                    Contains("at most"));
  CHECK_THROWS_WITH(
      idem::validate(idem::Options{.lease = std::chrono::hours{2}, .ttl = std::chrono::hours{1}}),
      Contains("at least the lease"));
  CHECK_THROWS_WITH(idem::validate(idem::Options{.wait = idem::Duration{-1}}), Contains("wait"));
}
