#pragma once
// Deprecated: moved to idem/backend/async_pool.hpp (idem::backend::AsyncBasicPool, beside the
// blocking BasicPool). This path forwards there for one release (see docs/changes.md) and will
// then be removed; include the new header.

#include "idem/backend/async_pool.hpp"

namespace idem::async {
template <class Driver>
using BasicPool [[deprecated("use idem::backend::AsyncBasicPool")]] =
    backend::AsyncBasicPool<Driver>;
}  // namespace idem::async
