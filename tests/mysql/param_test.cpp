// idem::mysql::Param holds its own text: a parameter list built from temporaries stays valid
// (under AddressSanitizer a view of a freed string would be a heap-use-after-free here).

#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "idem/mysql/param.hpp"

using idem::mysql::Param;

namespace {

// Long enough to live on the heap, not in the string's own buffer.
std::string param_test_text(char c) {
  return std::string(64, c);
}

}  // namespace

TEST_CASE("mysql param: text from temporaries is kept - strings, views of them, blobs") {
  std::vector<Param> values{param_test_text('a'), Param::blob(param_test_text('b'))};
  {
    const std::string scoped = param_test_text('c');
    values.emplace_back(std::string_view(scoped));
    values.emplace_back(scoped.c_str());
  }
  // The temporaries and the scoped string are gone; the heap they held is reused.
  const std::vector<std::string> reuse(8, param_test_text('z'));
  REQUIRE(values.size() == 4);
  CHECK(values[0].kind() == Param::Kind::text);
  CHECK(values[0].text() == param_test_text('a'));
  CHECK(values[1].kind() == Param::Kind::blob);
  CHECK(values[1].text() == param_test_text('b'));
  CHECK(values[2].text() == param_test_text('c'));
  CHECK(values[3].text() == param_test_text('c'));
  CHECK(reuse.size() == 8);
}

TEST_CASE("mysql param: copies and moves keep the text") {
  const Param original(param_test_text('d'));
  Param copy = original;
  const Param moved = std::move(copy);
  CHECK(original.text() == param_test_text('d'));
  CHECK(moved.text() == param_test_text('d'));
}
