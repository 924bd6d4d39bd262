#pragma once
// A Lua script as idem sends it: its source, and the SHA1 by which EVALSHA names it in the
// server's script cache.

#include <array>
#include <string>
#include <utility>

#include <openssl/evp.h>

#include "idem/errors.hpp"

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

}  // namespace idem::redis::detail
