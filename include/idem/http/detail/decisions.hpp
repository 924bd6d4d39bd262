#pragma once
// What idem::http::handle() and async_handle() decide, without I/O: the answer to a claim
// that does not run the business, and what to record for the business's response. Both
// drivers take these decisions from here, so the blocking and the coroutine endpoint give the
// same answers and leave the same records.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/detail/snapshot.hpp"
#include "idem/errors.hpp"
#include "idem/http/detail/stored_response.hpp"
#include "idem/http/message.hpp"
#include "idem/http/policy.hpp"
#include "idem/http/problem.hpp"
#include "idem/key.hpp"
#include "idem/record.hpp"
#include "idem/verdict.hpp"

namespace idem::http::detail {

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

// The answer to a claim whose verdict does not run the business: the replay, 409 or 422.
// nullopt for acquired (the business runs). `record` is the claim's record.
inline std::optional<Response> answer_without_running(Verdict verdict, const Record& record,
                                                      const Policy& policy) {
  switch (verdict) {
    case Verdict::replayed:
      return replayed_response(record, policy);
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
    case Verdict::outcome_unknown: {
      Headers extra;
      if (policy.outcome_unknown_retry_after_seconds > 0) {
        extra.push_back(
            {"Retry-After", std::to_string(policy.outcome_unknown_retry_after_seconds)});
      }
      return problem_response(
          Problem{policy.problem_type_base + "outcome-unknown", "Outcome unknown", 503,
                  "an earlier attempt with this idempotency key stopped during its effect and "
                  "whether it took place is being established; do not send a new key for this "
                  "operation: retry the same request later to get its outcome"},
          std::move(extra));
    }
    case Verdict::acquired:
      break;
  }
  return std::nullopt;
}

// What the record of a business that answered with a response holds: commit(snapshot), or
// fail(snapshot, retryable).
struct Recording {
  bool commit = false;
  nlohmann::json snapshot{};
  bool retryable = false;

  friend bool operator==(const Recording&, const Recording&) = default;
};

// The recording of `response` under the policy. Throws idem::InvalidArgument for a status
// outside 100-599 (the handler's bug; `caller` names the driver in the message), which leaves
// the claim to be failed retryably like any exception of the business.
inline Recording recording_for(const Response& response, const Policy& policy,
                               std::string_view caller) {
  if (response.status < 100 || response.status > 599) {
    throw InvalidArgument(fmt::format("{}: the business returned status {}, outside 100-599",
                                      caller, response.status));
  }
  nlohmann::json snapshot = encode_response(response, policy);
  const std::size_t bytes = snapshot.dump().size();
  if (bytes > max_snapshot_bytes) {
    // The business ran, so a retry must not run it again: duplicates get this note instead.
    const Problem note{policy.problem_type_base + "response-unstorable",
                       "Original response not stored", 500,
                       fmt::format("this operation ran once, but its response ({} bytes as "
                                   "stored) was over the {}-byte limit of a stored response",
                                   bytes, max_snapshot_bytes)};
    return Recording{false, encode_response(problem_response(note), policy), false};
  }
  switch (disposition(response.status, policy.stored)) {
    case Disposition::success:
      return Recording{true, std::move(snapshot), false};
    case Disposition::final:
      return Recording{false, std::move(snapshot), false};
    case Disposition::retryable:
      break;
  }
  return Recording{false, std::move(snapshot), true};
}

}  // namespace idem::http::detail
