#pragma once
// The one exception hierarchy of idem. Expected outcomes of a claim (replay, in progress,
// conflict) are values (idem::Verdict, idem::Outcome), never exceptions: what is thrown here
// is either a caller's mistake or an infrastructure failure.
//
//   idem::Error                      root; catch this to catch everything idem throws
//   ├── idem::InvalidArgument        a value broke a documented rule; nothing was changed
//   ├── idem::UsageError             the API was used out of order (commit twice, ...)
//   │   └── idem::BadOutcomeAccess   value()/error() of an Outcome that has none
//   ├── idem::LeaseLost              this worker's claim was taken over; its write was refused
//   ├── idem::StoreError             the store failed; retryable() says if a retry may succeed
//   │   └── idem::CorruptRecord      a stored record cannot be decoded
//   ├── idem::PermanentFailure       thrown by business code to record a non-retryable failure
//   │                                (in idem/permanent_failure.hpp: it carries a JSON error)
//   └── idem::EffectUnknown          thrown by business code that cannot tell whether its
//                                    effect outside the store happened

#include <stdexcept>
#include <string>
#include <utility>

namespace idem {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

class BadOutcomeAccess : public UsageError {
 public:
  using UsageError::UsageError;
};

class LeaseLost : public Error {
 public:
  using Error::Error;
};

// What the database (or its driver) said, kept apart from idem's own message in what().
struct Diagnostics {
  unsigned code = 0;  // MySQL/MariaDB error number (server ER_* or client CR_*), SQLite result code
  std::string sqlstate;      // e.g. "40001"; empty when unknown
  std::string message;       // the server's or driver's text, verbatim
  bool from_server = false;  // true when the server sent it; false for client-side failures
};

class StoreError : public Error {
 public:
  StoreError(const std::string& what, bool retryable, Diagnostics diagnostics = {})
      : Error(what), retryable_(retryable), diagnostics_(std::move(diagnostics)) {}

  // True when the same call may succeed if repeated (deadlock, timeout, lost connection).
  bool retryable() const noexcept { return retryable_; }
  const Diagnostics& diagnostics() const noexcept { return diagnostics_; }

 private:
  bool retryable_;
  Diagnostics diagnostics_;
};

class CorruptRecord : public StoreError {
 public:
  explicit CorruptRecord(const std::string& what) : StoreError(what, false) {}
};

// Throw from a business function run by idem::run_once or idem::consume (or under a guard,
// then call mark_unknown) when an effect outside the store may or may not have happened: a
// gateway call that timed out after the request went out. Running the business again could
// repeat the effect, and no answer is known to replay: the record becomes outcome_unknown,
// and nothing runs or replays until the resolver pass or a repair settles it
// (docs/recovery.md). On a store that cannot repair, and in same-transaction mode (whose
// business writes roll back anyway), it is an exception like any other.
class EffectUnknown : public Error {
 public:
  using Error::Error;
};

}  // namespace idem
