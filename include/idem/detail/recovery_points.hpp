#pragma once
// The recovery points of a record, without I/O: a JSON object, step name -> that step's result,
// kept in Record::recovery_points. Every store adds a step with with_step() and answers a
// step's kept result with kept_result(), so that the rules (names, bounds, first result wins)
// exist once.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/record.hpp"

namespace idem {

// The most steps one record keeps, and the longest step name.
inline constexpr std::size_t max_steps = 64;
inline constexpr std::size_t max_step_name_bytes = 64;

namespace detail {

// Step names are 1 to max_step_name_bytes of [A-Za-z0-9_.-]: they appear in derived keys sent
// downstream and in SQL-free JSON paths, so nothing needs quoting anywhere.
inline void check_step_name(std::string_view step) {
  bool ok = !step.empty() && step.size() <= max_step_name_bytes;
  for (const char c : step) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == '-';
    ok = ok && word;
  }
  if (!ok) {
    throw InvalidArgument(
        fmt::format("idem: a step name must be 1 to {} bytes of [A-Za-z0-9_.-], got \"{}\"",
                    max_step_name_bytes, printable(step)));
  }
}

inline nlohmann::json parse_points(std::string_view points) {
  if (points.empty()) return nlohmann::json::object();
  nlohmann::json doc = nlohmann::json::parse(points, nullptr, false);
  if (!doc.is_object()) {
    throw CorruptRecord("idem: the stored recovery points are not a JSON object");
  }
  return doc;
}

// The kept result (JSON text) of `step`, or nullopt when that step has not finished.
inline std::optional<std::string> kept_result(std::string_view points, std::string_view step) {
  if (points.empty()) return std::nullopt;
  const nlohmann::json doc = parse_points(points);
  const auto it = doc.find(std::string(step));
  if (it == doc.end()) return std::nullopt;
  return it->dump();
}

// How a local step (Attempt::step with a bound store) begins, from the points its claim found
// and the points this attempt believes are stored (the claim's plus its own writes since):
//  - kept: the claim found it finished (an earlier attempt committed it): its kept result;
//  - read: only this attempt's own write says so, and that write's transaction may have rolled
//    back (with_transaction runs a body again after a deadlock): read the points in the
//    transaction and run the step unless they hold it;
//  - run: nobody finished it. Run it, and write its point guarded by the believed points: the
//    claim guard turns a lost claim into LeaseLost, which rolls the step back with its
//    transaction, and a stale belief reads the points again. No read first: the points of a
//    held claim change only through this attempt.
enum class LocalStepStart { kept, read, run };

inline LocalStepStart local_step_start(std::string_view claimed, std::string_view believed,
                                       std::string_view step) {
  if (kept_result(claimed, step)) return LocalStepStart::kept;
  if (believed != claimed && kept_result(believed, step)) return LocalStepStart::read;
  return LocalStepStart::run;
}

// Throws InvalidArgument for a bad step name or a result that is not JSON text: what a store
// checks before anything else, so that bad input is never reported as a lost lease.
inline nlohmann::json checked_step(std::string_view step, std::string_view result) {
  check_step_name(step);
  nlohmann::json value = nlohmann::json::parse(result, nullptr, false);
  if (value.is_discarded()) {
    throw InvalidArgument(fmt::format("idem: the result of step {} is not JSON text", step));
  }
  return value;
}

// The recovery points with `step` added (result: JSON text). A step already kept keeps its
// first result: the answer is then `points` unchanged. Throws InvalidArgument for a bad name
// or result, or when the points would exceed max_steps or max_snapshot_bytes.
inline std::string with_step(std::string_view points, std::string_view step,
                             std::string_view result) {
  nlohmann::json value = checked_step(step, result);
  nlohmann::json doc = parse_points(points);
  if (doc.contains(std::string(step))) return std::string(points);
  if (doc.size() >= max_steps) {
    throw InvalidArgument(fmt::format(
        "idem: a record keeps at most {} steps; step {} is one too many", max_steps, step));
  }
  doc[std::string(step)] = std::move(value);
  std::string text = doc.dump();
  if (text.size() > max_snapshot_bytes) {
    throw InvalidArgument(fmt::format(
        "idem: with step {} the recovery points would be {} bytes, over the limit of {} bytes",
        step, text.size(), max_snapshot_bytes));
  }
  return text;
}

}  // namespace detail
}  // namespace idem
