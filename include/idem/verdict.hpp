#pragma once
// idem::Verdict: what a claim decided for this request.

#include <string_view>

namespace idem {

enum class Verdict {
  acquired,     // this caller owns the key: run the business, then commit or fail
  replayed,     // finished before: return the stored response (or the stored permanent error)
  in_progress,  // another caller holds a live lease: answer "in progress" (HTTP 409), retry later
  conflict,     // the key was used with a different request fingerprint: reject (HTTP 422)
  // an earlier attempt died during its effect and whether that effect happened is not known
  // yet: run nothing, invent no answer; retry later (a resolver or an operator settles it)
  outcome_unknown,
};

constexpr std::string_view to_string(Verdict v) noexcept {
  switch (v) {
    case Verdict::acquired:
      return "acquired";
    case Verdict::replayed:
      return "replayed";
    case Verdict::in_progress:
      return "in_progress";
    case Verdict::conflict:
      return "conflict";
    case Verdict::outcome_unknown:
      return "outcome_unknown";
  }
  return "unknown";
}

}  // namespace idem
