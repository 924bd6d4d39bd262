#pragma once
// idem::Transition: one move a StateMachine (idem/state_machine.hpp) declares legal, and
// IllegalTransition, thrown for a move it does not declare.

#include <string>
#include <type_traits>
#include <utility>

#include "idem/errors.hpp"

namespace idem {

template <class E>
concept StatusEnum = std::is_enum_v<E>;

// A move that was not declared. Thrown by StateMachine::transition before anything reaches a
// table, so an illegal move never costs a database round trip.
class IllegalTransition : public InvalidArgument {
 public:
  IllegalTransition(const std::string& what, std::string from, std::string to)
      : InvalidArgument(what), from_(std::move(from)), to_(std::move(to)) {}
  // The two statuses as the table stores them (decimal or the mapped name).
  const std::string& from() const noexcept { return from_; }
  const std::string& to() const noexcept { return to_; }

 private:
  std::string from_;
  std::string to_;
};

template <StatusEnum E>
struct Transition {
  E from;
  E to;
  friend bool operator==(const Transition&, const Transition&) = default;
};

}  // namespace idem
