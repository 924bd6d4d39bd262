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
// | the business threw idem::EffectUnknown, or a | 503 problem+json (outcome-unknown),         |
// | key whose outcome is unknown                 | Retry-After; nothing runs until a repair    |
//
// Which business responses are recorded is Policy::stored (idem/http/policy.hpp); the rest
// are recorded as retryable failures. An exception from the business records a retryable
// failure and propagates (as do the store's exceptions: idem::StoreError, idem::LeaseLost);
// map it to a 5xx in your server. idem::EffectUnknown (a call outside that may or may not have
// taken effect) marks the record outcome_unknown instead, as idem::run_once does.

#include <concepts>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "idem/errors.hpp"
#include "idem/guard.hpp"
#include "idem/http/detail/decisions.hpp"
#include "idem/http/message.hpp"
#include "idem/http/policy.hpp"
#include "idem/http/problem.hpp"
#include "idem/http/request_identity.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem::http {

namespace detail {

template <Store S>
void record(IdempotencyGuard<S>& guard, const Recording& recording) {
  if (recording.commit) {
    guard.commit(recording.snapshot);
  } else {
    guard.fail(recording.snapshot, recording.retryable);
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
  if (std::optional<Response> answer =
          detail::answer_without_running(guard.verdict(), guard.record(), policy)) {
    return std::move(*answer);
  }
  std::optional<Response> response;
  try {
    response.emplace(std::invoke(business));
  } catch (const EffectUnknown& e) {
    if constexpr (idem::detail::MarksUnknown<S>) {
      guard.mark_unknown(e.what());
      return *detail::answer_without_running(Verdict::outcome_unknown, guard.record(), policy);
    } else {
      throw;
    }
  }
  detail::record(guard, detail::recording_for(*response, policy, "idem::http::handle"));
  return std::move(*response);
}

}  // namespace idem::http
