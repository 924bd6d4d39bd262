#pragma once
// idem::http::async_handle(): idem::http::handle() (idem/http/handle.hpp) for coroutines on
// Boost.Asio, on an idem::async::AwaitableStore. The same answers and records: the table of
// handle.hpp and docs/http.md holds word for word, since both take their decisions from
// idem/http/detail/decisions.hpp. Link idem::async; idem/http.hpp stays free of Boost and does
// not include this header.
//
//   idem::http::Response r = co_await idem::http::async_handle(
//       store, request, [&]() -> net::awaitable<idem::http::Response> {
//         co_return co_await charge(request);
//       },
//       policy);
//
// The business returns an idem::http::Response, or a net::awaitable of one (a coroutine: the
// loop serves other requests while it waits). An exception from it, or a status outside
// 100-599, records a retryable failure before it propagates; so does a cancellation of the
// calling coroutine while the business runs. The store's exceptions (idem::StoreError,
// idem::LeaseLost) propagate; map them to a 5xx in your server.
//
// request and policy are referred to until the awaitable ends: co_await it in the expression
// that made it (idem/async/net.hpp).

#include <concepts>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "idem/async/guard.hpp"
#include "idem/async/net.hpp"
#include "idem/async/run_once.hpp"
#include "idem/async/store.hpp"
#include "idem/errors.hpp"
#include "idem/http/detail/decisions.hpp"
#include "idem/http/message.hpp"
#include "idem/http/policy.hpp"
#include "idem/http/problem.hpp"
#include "idem/http/request_identity.hpp"

namespace idem::http {

namespace detail {

template <idem::async::AwaitableStore S>
idem::async::net::awaitable<void> record(idem::async::IdempotencyGuard<S>& guard,
                                         const Recording& recording) {
  if (recording.commit) {
    co_await guard.commit(recording.snapshot);
  } else {
    co_await guard.fail(recording.snapshot, recording.retryable);
  }
}

// What async_handle records once the business ended: an unknown effect (the answer a duplicate
// gets from now on, as handle() gives it), the business's exception (the claim abandoned, then
// the exception rethrown), or the response's recording.
template <idem::async::AwaitableStore S>
idem::async::net::awaitable<Response> record_answer(idem::async::IdempotencyGuard<S>& guard,
                                                    std::optional<Response> response,
                                                    std::optional<Recording> recording,
                                                    std::optional<std::string> unknown,
                                                    std::exception_ptr thrown,
                                                    const Policy& policy) {
  if constexpr (idem::async::detail::MarksUnknown<S>) {
    if (unknown) {
      co_await guard.mark_unknown(*unknown);
      co_return *answer_without_running(Verdict::outcome_unknown, guard.record(), policy);
    }
  }
  if (thrown) {
    co_await guard.abandon();
    std::rethrow_exception(thrown);
  }
  co_await record(guard, *recording);
  co_return std::move(*response);
}

}  // namespace detail

template <idem::async::AwaitableStore S, std::invocable F>
requires std::convertible_to<idem::async::detail::response_of<F>, Response>
    idem::async::net::awaitable<Response> async_handle(S& store, const Request& request, F business,
                                                       const Policy& policy) {
  auto identity = identify(request, policy);
  if (const Problem* problem = std::get_if<Problem>(&identity)) {
    co_return problem_response(*problem);
  }
  const RequestIdentity& id = std::get<RequestIdentity>(identity);

  auto guard =
      co_await idem::async::IdempotencyGuard<S>::claim(store, id.key, id.fingerprint, policy.claim);
  if (std::optional<Response> answer =
          detail::answer_without_running(guard.verdict(), guard.record(), policy)) {
    co_return std::move(*answer);
  }

  std::optional<Response> response;
  std::optional<detail::Recording> recording;
  std::optional<std::string> unknown;
  std::exception_ptr thrown;
  try {
    response.emplace(co_await idem::async::detail::invoke_awaiting(business));
    recording.emplace(detail::recording_for(*response, policy, "idem::http::async_handle"));
  } catch (const EffectUnknown& e) {
    if constexpr (idem::async::detail::MarksUnknown<S>) {
      unknown = e.what();
    } else {
      thrown = std::current_exception();
    }
  } catch (...) {
    thrown = std::current_exception();
  }
  // Recorded before async_handle returns, also when this coroutine was cancelled meanwhile,
  // as run_once records (idem/async/detail/to_completion.hpp).
  const bool throws = co_await idem::async::net::this_coro::throw_if_cancelled();
  co_await idem::async::net::this_coro::throw_if_cancelled(false);
  std::optional<Response> answer;
  std::exception_ptr failed;
  try {
    answer.emplace(co_await detail::record_answer(guard, std::move(response), std::move(recording),
                                                  std::move(unknown), thrown, policy));
  } catch (...) {
    failed = std::current_exception();
  }
  co_await idem::async::net::this_coro::throw_if_cancelled(throws);
  if (failed) std::rethrow_exception(failed);
  co_return std::move(*answer);
}

// With the default Policy. An overload, not a default argument: that would build the Policy
// (whose replayed_headers is an initializer list) inside the caller's co_await expression,
// which GCC 12 cannot compile.
template <idem::async::AwaitableStore S, std::invocable F>
requires std::convertible_to<idem::async::detail::response_of<F>, Response>
    idem::async::net::awaitable<Response> async_handle(S& store, const Request& request,
                                                       F business) {
  static const Policy defaults{};
  return async_handle(store, request, std::move(business), defaults);
}

}  // namespace idem::http
