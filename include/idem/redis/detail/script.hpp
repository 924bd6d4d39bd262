#pragma once
// A Lua script as idem sends it: its source, and the SHA1 by which EVALSHA names it in the
// server's script cache.

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <openssl/evp.h>

#include "idem/errors.hpp"
#include "idem/redis/errors.hpp"
#include "idem/redis/reply.hpp"

namespace idem::redis {

// One script call: its keys (all in one hash slot) and its arguments.
struct ScriptCall {
  std::vector<std::string_view> keys;
  std::vector<std::string_view> args;
};

}  // namespace idem::redis

namespace idem::redis::detail {

struct Script {
  std::string source;
  std::string sha;  // lowercase hex, as SCRIPT LOAD answers it
};

inline Script make_script(std::string source) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  if (EVP_Digest(source.data(), source.size(), digest.data(), &len, EVP_sha1(), nullptr) != 1) {
    throw Error("idem::redis: OpenSSL EVP_Digest(SHA-1) failed");
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string sha;
  sha.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    sha += hex[digest[i] >> 4];
    sha += hex[digest[i] & 0xf];
  }
  return {std::move(source), std::move(sha)};
}

// The command that runs `call`: EVALSHA <sha> <number of keys> <keys> <args>.
inline std::vector<std::string_view> script_args(const Script& script, const ScriptCall& call) {
  static constexpr std::string_view counts[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8"};
  std::vector<std::string_view> args;
  args.reserve(3 + call.keys.size() + call.args.size());
  args.push_back("EVALSHA");
  args.push_back(script.sha);
  args.push_back(counts[std::min<std::size_t>(call.keys.size(), std::size(counts) - 1)]);
  args.insert(args.end(), call.keys.begin(), call.keys.end());
  args.insert(args.end(), call.args.begin(), call.args.end());
  return args;
}

// A server that does not know the script yet (restarted, flushed, a new node) answers
// NOSCRIPT; the command is then sent again with the source (EVAL), which caches it.
inline bool unknown_script(const ReplyView& r) {
  return r.is_error() && error_name(r.text()) == "NOSCRIPT";
}
inline void send_source(const Script& script, std::vector<std::string_view>& args) {
  args[0] = "EVAL";
  args[1] = script.source;
}

}  // namespace idem::redis::detail
