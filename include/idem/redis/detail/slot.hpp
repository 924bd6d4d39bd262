#pragma once
// The Redis Cluster hash slot of a key: CRC16 (XMODEM: polynomial 0x1021, initial value 0) of
// the key, or of its hash tag, modulo 16384. The hash tag is what lies between the first '{'
// and the first '}' after it, when that is not empty.

#include <array>
#include <cstdint>
#include <string_view>

namespace idem::redis::detail {

inline constexpr std::uint16_t slot_count = 16384;

constexpr std::array<std::uint16_t, 256> crc16_table() {
  std::array<std::uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    t[i] = crc;
  }
  return t;
}

constexpr std::uint16_t crc16(std::string_view s) noexcept {
  constexpr std::array<std::uint16_t, 256> table = crc16_table();
  std::uint16_t crc = 0;
  for (const char c : s) {
    crc = static_cast<std::uint16_t>((crc << 8) ^
                                     table[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]);
  }
  return crc;
}

constexpr std::string_view hash_tag(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return key;
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

constexpr std::uint16_t key_slot(std::string_view key) noexcept {
  return static_cast<std::uint16_t>(crc16(hash_tag(key)) % slot_count);
}

// The check value of CRC16/XMODEM, and the slot the Redis Cluster specification gives.
static_assert(crc16("123456789") == 0x31C3);

}  // namespace idem::redis::detail
