#pragma once
// Argument checks shared by every store, so that all backends refuse the same inputs with
// the same messages before anything is written.

#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/record.hpp"

namespace idem::detail {

inline void check_fingerprint(std::string_view fp) {
  if (fp.size() > max_fingerprint_bytes) {
    throw InvalidArgument(fmt::format("idem: fingerprint must be at most {} bytes, got {}",
                                      max_fingerprint_bytes, fp.size()));
  }
  for (std::size_t i = 0; i < fp.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(fp[i]);
    if (c <= 0x20 || c >= 0x7f) {
      throw InvalidArgument(fmt::format(
          "idem: fingerprint must be printable ASCII without spaces; byte {} of \"{}\" is not", i,
          printable(fp)));
    }
  }
}

inline void check_snapshot(std::string_view snapshot) {
  if (snapshot.size() > max_snapshot_bytes) {
    throw InvalidArgument(fmt::format("idem: snapshot is {} bytes, over the limit of {} bytes",
                                      snapshot.size(), max_snapshot_bytes));
  }
}

}  // namespace idem::detail
