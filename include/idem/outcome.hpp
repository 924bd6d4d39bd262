#pragma once
// idem::Outcome<T>: the result of an idempotent call as a value, in the style of a Result with
// operator bool. It holds exactly one of:
//   - a value: the business ran now (acquired) or ran before and its response was replayed;
//   - an error: a permanent failure, recorded now or replayed. failed() is true, and value()
//     throws, so a replayed failure can never be mistaken for a success;
//   - neither: in_progress or conflict; record() shows the stored record that decided it.

#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/errors.hpp"
#include "idem/record.hpp"
#include "idem/verdict.hpp"

namespace idem {

template <class T>
class Outcome {
 public:
  // Holds nothing, with the verdict in_progress (answer "retry later"): what an asynchronous
  // completion hands its handler beside an exception (co_spawn, parallel_group), never an
  // answer of idem's. Check the exception first.
  Outcome() noexcept : verdict_(Verdict::in_progress) {}

  static Outcome success(Verdict v, T value, std::optional<Record> record = std::nullopt) {
    Outcome o(v, std::move(record));
    o.value_.emplace(std::move(value));
    return o;
  }
  static Outcome failure(Verdict v, nlohmann::json error,
                         std::optional<Record> record = std::nullopt) {
    Outcome o(v, std::move(record));
    o.error_.emplace(std::move(error));
    return o;
  }
  static Outcome none(Verdict v, std::optional<Record> record = std::nullopt) {
    return Outcome(v, std::move(record));
  }

  Verdict verdict() const noexcept { return verdict_; }
  bool acquired() const noexcept { return verdict_ == Verdict::acquired; }
  bool replayed() const noexcept { return verdict_ == Verdict::replayed; }

  // True when there is a value to use (fresh or replayed success).
  bool has_value() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }

  // True when the result is a recorded permanent failure (fresh or replayed).
  bool failed() const noexcept { return error_.has_value(); }

  const T& value() const& {
    require_value();
    return *value_;
  }
  T& value() & {
    require_value();
    return *value_;
  }
  T&& value() && {
    require_value();
    return std::move(*value_);
  }

  const nlohmann::json& error() const {
    if (!error_) {
      throw BadOutcomeAccess(fmt::format("idem::Outcome::error(): no error (verdict {}{})",
                                         to_string(verdict_), value_ ? ", has a value" : ""));
    }
    return *error_;
  }

  // The record the verdict was read from or written to, when the store reported one.
  const std::optional<Record>& record() const noexcept { return record_; }

 private:
  Outcome(Verdict v, std::optional<Record> record) : verdict_(v), record_(std::move(record)) {}

  void require_value() const {
    if (!value_) {
      throw BadOutcomeAccess(fmt::format("idem::Outcome::value(): no value (verdict {}{})",
                                         to_string(verdict_),
                                         error_ ? ", a recorded failure: check failed()" : ""));
    }
  }

  Verdict verdict_;
  std::optional<T> value_;
  std::optional<nlohmann::json> error_;
  std::optional<Record> record_;
};

}  // namespace idem
