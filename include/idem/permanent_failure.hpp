#pragma once
// idem::PermanentFailure: what business code throws to record a failure that must not be
// retried. Kept out of errors.hpp, which the whole library includes, because it carries a JSON
// error and so needs nlohmann_json; only the code that throws or catches it pays for that.

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "idem/errors.hpp"

namespace idem {

// Throw from a business function run by idem::run_once or idem::consume to record a failure
// that must not be retried (e.g. "card declined"); every later duplicate replays this error
// instead of running.
class PermanentFailure : public Error {
 public:
  explicit PermanentFailure(nlohmann::json error)
      : Error(describe(error)), error_(std::move(error)) {}
  // Lets `throw PermanentFailure({{"error", "card_declined"}})` pick this class's JSON.
  explicit PermanentFailure(nlohmann::json::initializer_list_t error)
      : PermanentFailure(nlohmann::json(error)) {}

  const nlohmann::json& error() const noexcept { return error_; }

 private:
  static std::string describe(const nlohmann::json& error) {
    return "permanent failure: " +
           error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  nlohmann::json error_;
};

}  // namespace idem
