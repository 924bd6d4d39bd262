#pragma once
// The decision table: what a claim does when a record for the key already exists.
// Every backend calls decide() (or implements exactly the same rules in SQL), so that the
// memory, MySQL and SQLite stores answer every case alike. docs/design.md explains each row.
//
//   stored record                     | decision            | store action
//   ----------------------------------+---------------------+-------------------------------------
//   expire_at <= now (any status)     | take_over_expired   | reset as a brand-new claim, fence + 1
//   fingerprint differs               | conflict            | none
//   succeeded                         | replay              | none
//   failed, not retryable             | replay (a failure)  | none
//   failed, retryable                 | take_over_retry     | fence + 1, attempts + 1, new lease
//   processing, lease_until > now     | in_progress         | none
//   processing, lease_until <= now    | take_over_retry     | fence + 1, attempts + 1, new lease
//
// (No record at all: insert a processing claim with fence 1.)

#include <string>
#include <string_view>
#include <utility>

#include "idem/clock.hpp"
#include "idem/record.hpp"
#include "idem/status.hpp"

namespace idem {

enum class Decision {
  take_over_expired,  // the old record no longer counts: start afresh with this request
  take_over_retry,    // the previous attempt failed retryably or its worker's lease ran out
  replay,             // answer with the stored result (success or permanent failure)
  in_progress,        // a live claim holds the key
  conflict,           // same key, different request
};

// Fingerprints are compared only when both sides have one: an empty fingerprint means the
// caller opted out of payload checks.
constexpr bool fingerprints_match(std::string_view stored, std::string_view request) noexcept {
  return stored.empty() || request.empty() || stored == request;
}

inline Decision decide(const Record& stored, std::string_view fingerprint, TimePoint now) noexcept {
  if (stored.expire_at <= now) return Decision::take_over_expired;
  if (!fingerprints_match(stored.fingerprint, fingerprint)) return Decision::conflict;
  switch (stored.status) {
    case Status::succeeded:
      return Decision::replay;
    case Status::failed:
      return stored.retryable ? Decision::take_over_retry : Decision::replay;
    case Status::processing:
      break;
  }
  return stored.lease_until > now ? Decision::in_progress : Decision::take_over_retry;
}

// Applies a takeover decision to a record in place: the new state a backend must write.
// take_over_retry keeps the stored fingerprint unless it was empty; take_over_expired
// replaces everything with this request's. Both push expire_at to now + ttl, so a renewed
// attempt can never expire under its own lease.
inline void apply_takeover(Record& r, Decision d, std::string_view fingerprint, std::string owner,
                           TimePoint now, Duration lease, Duration ttl) {
  if (d == Decision::take_over_expired) {
    r.fingerprint = std::string(fingerprint);
    r.attempts = 1;
    r.created_at = now;
  } else {
    if (r.fingerprint.empty()) r.fingerprint = std::string(fingerprint);
    r.attempts += 1;
  }
  r.status = Status::processing;
  r.ticket = Ticket{r.ticket.fence + 1, std::move(owner)};
  r.snapshot.clear();
  r.retryable = false;
  r.updated_at = now;
  r.lease_until = now + lease;
  r.expire_at = now + ttl;
}

}  // namespace idem
