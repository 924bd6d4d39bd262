#pragma once
// Random owner tokens: 128 bits as 32 hex characters, unique per claim in practice.

#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>

namespace idem::detail {

inline std::string new_owner_token() {
  struct Engine {
    pid_t pid = -1;
    std::mt19937_64 rng;
  };
  thread_local Engine engine;
  // A forked child inherits the parent's engine state; reseed so that pre-forked workers can
  // never draw the same tokens (a backend may recognise a row as its own by the token).
  if (const pid_t pid = ::getpid(); pid != engine.pid) {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd(), static_cast<unsigned>(pid)};
    engine.rng.seed(seq);
    engine.pid = pid;
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int half = 0; half < 2; ++half) {
    std::uint64_t v = engine.rng();
    for (int i = 0; i < 16; ++i, v >>= 4) {
      out[static_cast<std::size_t>(half * 16 + i)] = hex[v & 0xf];
    }
  }
  return out;
}

}  // namespace idem::detail
