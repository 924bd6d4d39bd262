#pragma once
// idem::http::Policy: how one endpoint reads its idempotency key and which of its responses
// are kept for replay.

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/http/idempotency_key.hpp"
#include "idem/http/message.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"

namespace idem::http {

// The default name of the response header, value "true", that marks a replay.
inline constexpr std::string_view replayed_header = "Idempotent-Replayed";

// Which responses of the business are recorded and replayed to every retry with the same key.
// Whatever is not recorded is recorded as a retryable failure: the next retry runs again.
enum class StoredResponses {
  // 2xx and 3xx only. A 4xx answer is forgotten and a retry runs the business again: only
  // safe when the endpoint's 4xx paths have no side effects.
  successes,
  // 2xx, 3xx and the final 4xx answers (all but 408, 425 and 429, which mean "try again").
  // The default: a 4xx the business decided (card declined, validation failed) is its answer
  // to this request; running it again for a retry may repeat effects it had before refusing.
  successes_and_client_errors,
};

struct Policy {
  // The key's biz_type: one per operation (e.g. "payments.create"), so the same client key on
  // two operations never collides. 1-32 bytes of [A-Za-z0-9_.-].
  std::string biz_type = "http";
  // The request header that carries the key.
  std::string header = "Idempotency-Key";
  // The forms of the key that header may take: by default the quoted sf-string and the bare
  // key many SDKs send (the same key either way); quoted_only demands strict RFC 8941.
  KeySyntax key_syntax = KeySyntax::quoted_or_bare;
  // Fallback for proxies that strip unknown headers: a top-level string member of a JSON
  // object body (e.g. "idempotency_key"), read only when the header is absent. Empty: off.
  std::string body_field{};
  StoredResponses stored = StoredResponses::successes_and_client_errors;
  // Response headers recorded and replayed besides Content-Type (always kept). Never put
  // Set-Cookie or other per-caller headers here.
  std::vector<std::string> replayed_headers = {"Location"};
  // The header, value "true", added to every replay (never to the first caller's response),
  // so a client can tell a replay from a fresh answer.
  std::string replay_header{replayed_header};
  // The claim's lease, ttl and wait (a duplicate waits up to `wait` for the first request to
  // finish and then replays, instead of answering 409 at once).
  Options claim{};
  // Prefix of the problem "type" URIs (the suffix names the problem, e.g. "key-missing").
  // Point it at your API docs, e.g. "https://api.example.com/problems/idempotency-".
  std::string problem_type_base = "urn:idem:problem:idempotency-";
  // Retry-After (seconds) sent with 409 "in progress"; 0 sends none.
  int retry_after_seconds = 1;
  // Retry-After (seconds) sent with 503 "outcome unknown": an earlier attempt died during its
  // effect, and a resolver pass or an operator settles it (docs/recovery.md); 0 sends none.
  int outcome_unknown_retry_after_seconds = 60;
};

namespace detail {

inline void validate_field_name(std::string_view field, std::string_view name) {
  if (!is_field_name(name)) {
    throw InvalidArgument(fmt::format(
        "idem::http::Policy::{} must be an HTTP field name (one or more letters, digits or "
        "!#$%&'*+-.^_`|~), got \"{}\"",
        field, idem::detail::printable(name)));
  }
}

}  // namespace detail

// Throws idem::InvalidArgument when a field breaks its rule.
inline void validate(const Policy& p) {
  try {
    idem::detail::validate_biz_type(p.biz_type);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("idem::http::Policy::biz_type: {}", e.what()));
  }
  detail::validate_field_name("header", p.header);
  detail::validate_field_name("replay_header", p.replay_header);
  // A stored header of the same name would reach the client twice, once with another value.
  bool stored = field_name_equals(p.replay_header, "Content-Type");
  for (const std::string& name : p.replayed_headers)
    stored = stored || field_name_equals(p.replay_header, name);
  if (stored) {
    throw InvalidArgument(fmt::format(
        "idem::http::Policy::replay_header \"{}\" is a stored header (Content-Type or one of "
        "replayed_headers); name a header of its own",
        p.replay_header));
  }
  if (p.retry_after_seconds < 0) {
    throw InvalidArgument(
        fmt::format("idem::http::Policy::retry_after_seconds must not be negative, got {}",
                    p.retry_after_seconds));
  }
  if (p.outcome_unknown_retry_after_seconds < 0) {
    throw InvalidArgument(fmt::format(
        "idem::http::Policy::outcome_unknown_retry_after_seconds must not be negative, got {}",
        p.outcome_unknown_retry_after_seconds));
  }
  idem::validate(p.claim);
}

// What is recorded for a response status.
enum class Disposition {
  success,    // recorded as succeeded; replayed
  final,      // recorded as a permanent failure; replayed
  retryable,  // recorded as a retryable failure; the next retry runs the business again
};

inline Disposition disposition(int status, StoredResponses stored) noexcept {
  if (status >= 200 && status <= 399) return Disposition::success;
  const bool transient = status == 408 || status == 425 || status == 429;
  if (status >= 400 && status <= 499 && !transient &&
      stored == StoredResponses::successes_and_client_errors) {
    return Disposition::final;
  }
  return Disposition::retryable;  // 5xx, transient 4xx, or 4xx not kept by the policy
}

}  // namespace idem::http
