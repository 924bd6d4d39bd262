// Fuzzes snapshot decoding (what a replay does with the bytes a store returns). Decoding as any
// type either succeeds or throws idem::CorruptRecord, nothing else; a snapshot that decodes as
// JSON encodes back to a snapshot that decodes to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <idem/detail/snapshot.hpp>

namespace {

template <class T>
void decode(std::string_view text) {
  try {
    (void)idem::detail::decode_snapshot<T>(text);
  } catch (const idem::CorruptRecord&) {
  } catch (...) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  decode<std::string>(text);
  decode<long long>(text);
  decode<int>(text);
  decode<unsigned>(text);
  decode<std::uint8_t>(text);
  decode<double>(text);
  decode<float>(text);
  decode<bool>(text);
  decode<std::vector<std::string>>(text);
  decode<std::map<std::string, std::string>>(text);
  // Not decoded here: numbers nested in containers (std::vector<int>, ...). nlohmann_json
  // converts those with a plain cast, undefined when a stored float does not fit; idem checks
  // the range of a top-level number only (docs/reliability.md, "what idem does not promise").
  nlohmann::json j;
  try {
    j = idem::detail::parse_snapshot(text);
  } catch (const idem::CorruptRecord&) {
    return 0;
  } catch (...) {
    std::abort();
  }
  std::string encoded;
  try {
    encoded = idem::detail::encode_snapshot(j);
  } catch (const idem::InvalidArgument&) {
    return 0;  // over the snapshot limit
  }
  if (idem::detail::decode_snapshot<nlohmann::json>(encoded) != j) std::abort();
  (void)idem::detail::encode_error(j);
  return 0;
}
