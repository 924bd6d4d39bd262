// Fuzzes fingerprint canonicalisation. For every input that parses as JSON: canonical_json()
// never throws (the parser already refused bad UTF-8), canonical text is a fixed point
// (canonicalising it again changes nothing), and the fingerprint of the value equals the
// fingerprint of its canonical text parsed back. Any input also fingerprints as raw bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <idem/fingerprint.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (idem::fingerprint(bytes).size() != 64) std::abort();
  const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded()) return 0;
  std::string canonical;
  try {
    canonical = idem::canonical_json(j);
  } catch (...) {
    std::abort();  // parsed JSON always has a canonical form
  }
  const nlohmann::json again = nlohmann::json::parse(canonical, nullptr, false);
  if (again.is_discarded()) std::abort();
  if (idem::canonical_json(again) != canonical) std::abort();
  if (idem::fingerprint(again) != idem::fingerprint(j)) std::abort();
  return 0;
}
