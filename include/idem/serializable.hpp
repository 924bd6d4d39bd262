#pragma once
// What a response type needs for idem to record and replay it: nlohmann_json must be able to
// write it (to_json or an adl_serializer) and, to replay it, read it back (from_json).
// IdempotencyGuard::commit / replay, run_once and consume state their types with these.

#include <concepts>

#include <nlohmann/json.hpp>

namespace idem {

// A response type idem can record: anything nlohmann_json can serialise.
template <class T>
concept Serializable = std::constructible_from<nlohmann::json, const T&>;

// A response type idem can replay: nlohmann_json can read it back.
template <class T>
concept Deserializable = requires(const nlohmann::json& j) {
  j.template get<T>();
};

}  // namespace idem
