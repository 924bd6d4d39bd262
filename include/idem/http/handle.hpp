#pragma once
// idem::http::handle(): one idempotent HTTP operation, independent of the HTTP library.
//
//   idem::http::Policy policy{.biz_type = "payments.create"};
//   idem::http::Response r = idem::http::handle(store, request, [&] { return charge(request); },
//                                               policy);
//
// | the request                                  | the answer                                  |
// |----------------------------------------------|---------------------------------------------|
// | no key, or a malformed / too long key        | 400 problem+json; nothing written           |
// | new key (or the last try failed retryably)   | runs the business; its response as it is    |
// | key of a finished request, same payload      | the stored response + Policy::replay_header |
// | key of a request still running               | 409 problem+json, Retry-After               |
// | key already used with another payload        | 422 problem+json                            |
//
// Which business responses are recorded is Policy::stored (idem/http/policy.hpp); the rest
// are recorded as retryable failures. An exception from the business records a retryable
// failure and propagates (as do the store's exceptions: idem::StoreError, idem::LeaseLost);
// map it to a 5xx in your server.

#include <concepts>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/errors.hpp"
#include "idem/guard.hpp"
#include "idem/http/detail/stored_response.hpp"
#include "idem/http/message.hpp"
#include "idem/http/policy.hpp"
#include "idem/http/problem.hpp"
#include "idem/http/request_identity.hpp"
#include "idem/record.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem::http {

namespace detail {

// The stored response of a replayed record, marked with Policy::replay_header. Throws
// idem::CorruptRecord when the record does not hold a response snapshot (written by something
// other than idem::http under the same biz_type, or damaged).
inline Response replayed_response(const Record& record, const Policy& policy) {
  const nlohmann::json j = idem::detail::parse_snapshot(record.snapshot);
  std::optional<Response> r = decode_response(j);
  if (!r) {
    throw CorruptRecord(fmt::format(
        "idem::http: the record of key {}/{} does not hold a stored HTTP response (is the "
        "biz_type shared with non-HTTP code?)",
        record.key.biz_type(), idem::detail::printable(record.key.id())));
  }
  r->headers.push_back({policy.replay_header, "true"});
  return std::move(*r);
}

template <Store S>
void record_response(IdempotencyGuard<S>& guard, const Response& response, const Policy& policy) {
  if (response.status < 100 || response.status > 599) {
    throw InvalidArgument(fmt::format(
        "idem::http::handle: the business returned status {}, outside 100-599", response.status));
  }
  const nlohmann::json snapshot = encode_response(response, policy);
  const std::size_t bytes = snapshot.dump().size();
  if (bytes > max_snapshot_bytes) {
    // The business ran, so a retry must not run it again: duplicates get this note instead.
    const Problem note{policy.problem_type_base + "response-unstorable",
                       "Original response not stored", 500,
                       fmt::format("this operation ran once, but its response ({} bytes as "
                                   "stored) was over the {}-byte limit of a stored response",
                                   bytes, max_snapshot_bytes)};
    guard.fail(encode_response(problem_response(note), policy), false);
    return;
  }
  switch (disposition(response.status, policy.stored)) {
    case Disposition::success:
      guard.commit(snapshot);
      return;
    case Disposition::final:
      guard.fail(snapshot, false);
      return;
    case Disposition::retryable:
      guard.fail(snapshot, true);
      return;
  }
}

}  // namespace detail

template <Store S, std::invocable F>
requires std::convertible_to<std::invoke_result_t<F&>, Response> Response
handle(S& store, const Request& request, F&& business, const Policy& policy = {}) {
  auto identity = identify(request, policy);
  if (const Problem* problem = std::get_if<Problem>(&identity)) return problem_response(*problem);
  const RequestIdentity& id = std::get<RequestIdentity>(identity);

  IdempotencyGuard<S> guard{store, id.key, id.fingerprint, policy.claim};
  switch (guard.verdict()) {
    case Verdict::replayed:
      return detail::replayed_response(guard.record(), policy);
    case Verdict::in_progress: {
      Headers extra;
      if (policy.retry_after_seconds > 0) {
        extra.push_back({"Retry-After", std::to_string(policy.retry_after_seconds)});
      }
      return problem_response(
          Problem{policy.problem_type_base + "key-in-use", "Request in progress", 409,
                  "a request with this idempotency key is still being processed; retry the same "
                  "request later to get its response"},
          std::move(extra));
    }
    case Verdict::conflict:
      return problem_response(
          Problem{policy.problem_type_base + "key-reused", "Idempotency key reused", 422,
                  "this idempotency key was already used for a different request (method, target "
                  "or body differ); send a new key for a new operation"});
    case Verdict::acquired:
      break;
  }

  Response response = std::invoke(business);
  detail::record_response(guard, response, policy);
  return response;
}

}  // namespace idem::http
