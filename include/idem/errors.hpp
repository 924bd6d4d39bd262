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
//   │   ├── idem::CorruptRecord      a stored record cannot be decoded
//   │   └── idem::SchemaMismatch     the record table is not what idem expects
//   ├── idem::PermanentFailure       thrown by business code to record a non-retryable failure
//   │                                (in idem/permanent_failure.hpp: it carries a JSON error)
//   └── idem::EffectUnknown          thrown by business code that cannot tell whether its
//                                    effect outside the store happened

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

// The record table is not what idem expects: a column missing or of another type, a key column
// that does not compare byte for byte, the primary key or an index missing. Thrown by a
// store's schema check before it claims anything; each problem names the column or index and
// the statement that fixes it. Not retryable: the table must be fixed first.
class SchemaMismatch : public StoreError {
 public:
  struct Problem {
    std::string what;  // e.g. "column status is varchar(16), idem expects tinyint"
    std::string fix;   // e.g. "ALTER TABLE `t` MODIFY status TINYINT NOT NULL DEFAULT 0"
  };

  SchemaMismatch(const std::string& table, std::vector<Problem> problems)
      : StoreError(message(table, problems), false), problems_(std::move(problems)) {}

  const std::vector<Problem>& problems() const noexcept { return problems_; }

 private:
  static std::string message(const std::string& table, const std::vector<Problem>& problems) {
    std::string text = "idem: the record table " + table + " is not what idem expects:";
    for (const Problem& p : problems)
      text += "\n  - " + p.what + "; fix: " + p.fix;
    return text;
  }

  std::vector<Problem> problems_;
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
