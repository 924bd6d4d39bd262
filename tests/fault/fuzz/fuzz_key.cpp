// Fuzzes idem::Key validation: byte 0 splits the input into biz_type and id. A key that is
// accepted must obey every documented rule (checked here by an independent reading of the
// rules); a key that is refused must be refused with idem::InvalidArgument and nothing else.
// The same bytes (after byte 0) are also read as an Idempotency-Key field value in both
// KeySyntax modes: refusals are idem::InvalidArgument only, both modes agree on quoted values,
// and a bare value is accepted exactly when an independent reading of the bare set says so.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <idem/http/idempotency_key.hpp>
#include <idem/key.hpp>

namespace {

bool biz_type_ok(std::string_view s) {
  if (s.empty() || s.size() > idem::max_biz_type_bytes) return false;
  for (unsigned char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Decodes UTF-8 the long way round (by the table of RFC 3629, section 4).
bool id_ok(std::string_view s) {
  if (s.empty() || s.size() > idem::max_id_bytes) return false;
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const auto tail = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xbf) {
      return i + k < s.size() && b(k) >= lo && b(k) <= hi;
    };
    const unsigned c = b(0);
    if (c <= 0x7f) {
      if (c < 0x20 || c == 0x7f) return false;
      i += 1;
    } else if (c >= 0xc2 && c <= 0xdf && tail(1)) {
      if (c == 0xc2 && b(1) <= 0x9f) return false;  // C1 controls U+0080-U+009F
      i += 2;
    } else if (c == 0xe0 && tail(1, 0xa0) && tail(2)) {
      i += 3;
    } else if (((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) && tail(1) && tail(2)) {
      i += 3;
    } else if (c == 0xed && tail(1, 0x80, 0x9f) && tail(2)) {
      i += 3;
    } else if (c == 0xf0 && tail(1, 0x90) && tail(2) && tail(3)) {
      i += 4;
    } else if (c >= 0xf1 && c <= 0xf3 && tail(1) && tail(2) && tail(3)) {
      i += 4;
    } else if (c == 0xf4 && tail(1, 0x80, 0x8f) && tail(2) && tail(3)) {
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

std::optional<std::string> header_key(std::string_view value, idem::http::KeySyntax syntax) {
  try {
    return idem::http::parse_idempotency_key(value, syntax);
  } catch (const idem::InvalidArgument& e) {
    if (std::string_view(e.what()).empty()) std::abort();
    return std::nullopt;
  }
}

bool ows(char c) {
  return c == ' ' || c == '\t';
}

// The field value read both ways: a quoted value means the same to both modes; a bare one is a
// key (itself, trimmed) for quoted_or_bare only, and only of letters, digits and -._~:+/=.
void check_header(std::string_view value) {
  const auto strict = header_key(value, idem::http::KeySyntax::quoted_only);
  const auto lenient = header_key(value, idem::http::KeySyntax::quoted_or_bare);
  for (const auto& key : {strict, lenient}) {
    if (!key) continue;
    if (key->empty()) std::abort();
    for (unsigned char c : *key)
      if (c < 0x20 || c > 0x7e) std::abort();
    // What a server accepts, a client can send back quoted and get the same key.
    if (header_key(idem::http::format_idempotency_key(*key), idem::http::KeySyntax::quoted_only) !=
        key) {
      std::abort();
    }
  }
  std::string_view trimmed = value;
  while (!trimmed.empty() && ows(trimmed.front()))
    trimmed.remove_prefix(1);
  while (!trimmed.empty() && ows(trimmed.back()))
    trimmed.remove_suffix(1);
  const bool quoted = !trimmed.empty() && trimmed.front() == '"';
  if (quoted && lenient != strict) std::abort();
  if (strict && !quoted) std::abort();
  if (!quoted) {
    bool bare_ok = !trimmed.empty();
    for (unsigned char c : trimmed) {
      const bool ok =
          (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          std::string_view{"-._~:+/="}.find(static_cast<char>(c)) != std::string_view::npos;
      bare_ok = bare_ok && ok;
    }
    if (bare_ok != lenient.has_value()) std::abort();
    if (lenient && *lenient != trimmed) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t split = data[0] <= all.size() ? data[0] : all.size();
  const std::string biz(all.substr(0, split));
  const std::string id(all.substr(split));
  const bool expected = biz_type_ok(biz) && id_ok(id);
  bool accepted = false;
  try {
    const idem::Key key{biz, id};
    accepted = key.biz_type() == biz && key.id() == id;
    if (!accepted) std::abort();  // a key must keep its bytes
  } catch (const idem::InvalidArgument& e) {
    if (std::string_view(e.what()).empty()) std::abort();
  }
  if (accepted != expected) std::abort();
  (void)idem::detail::printable(all);
  check_header(all);
  return 0;
}
