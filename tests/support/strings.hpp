#pragma once
// Text helpers shared by the tests.

#include <string>

namespace idem_test {

// `s` between double quotes, appended in place: GCC 12 warns falsely (-Warray-bounds, an
// error here) on '"' + std::string(n, c) + '"' once optimised.
inline std::string quoted(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

}  // namespace idem_test
