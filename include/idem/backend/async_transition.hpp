#pragma once
// A StateMachine transition in a coroutine, written once for the backends' async_apply
// (idem/mysql/async_state_machine.hpp, idem/pg/async_state_machine.hpp): the guarded UPDATE,
// then, when a rejection is to be explained, the read; each backend passes how it runs them.

#include <cstdint>
#include <optional>
#include <utility>

#include "idem/async/net.hpp"
#include "idem/guarded_transition.hpp"
#include "idem/state_machine.hpp"
#include "idem/transition_result.hpp"

namespace idem::backend {

// execute(t) answers the rows the UPDATE changed; probe(t) the row read (or none).
template <StatusEnum E, class Execute, class Probe>
async::net::awaitable<TransitionResult<E>> async_transition(const StateMachine<E>& machine,
                                                            GuardedTransition t,
                                                            TransitionOptions options,
                                                            Execute execute, Probe probe) {
  const std::uint64_t changed = co_await execute(t);
  if (std::optional<TransitionResult<E>> result = machine.concluded(t, changed, options)) {
    co_return std::move(*result);
  }
  const std::optional<ProbeRow> row = co_await probe(t);
  co_return machine.explained(t, row);
}

}  // namespace idem::backend
