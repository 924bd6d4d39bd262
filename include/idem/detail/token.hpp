#pragma once
// Random owner tokens: 128 bits as 32 hex characters, unique per claim in practice.

#include <cstdint>
#include <random>
#include <string>

namespace idem::detail {

inline std::string new_owner_token() {
  thread_local std::mt19937_64 engine = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64{seq};
  }();
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int half = 0; half < 2; ++half) {
    std::uint64_t v = engine();
    for (int i = 0; i < 16; ++i, v >>= 4)
      out[static_cast<std::size_t>(half * 16 + i)] = hex[v & 0xf];
  }
  return out;
}

}  // namespace idem::detail
