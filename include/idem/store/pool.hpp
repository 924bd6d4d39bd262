#pragma once
// Deprecated: moved to idem/backend/pool.hpp (namespace idem::backend) and idem/pool_params.hpp.
// This path forwards there for one release (see docs/changes.md) and will then be removed; include
// the new header.

#include "idem/backend/pool.hpp"
#include "idem/pool_params.hpp"

namespace idem {
using PoolUse [[deprecated("use idem::backend::ConnectionPurpose")]] = backend::ConnectionPurpose;
template <class Driver>
using BasicPool [[deprecated("use idem::backend::BasicPool")]] = backend::BasicPool<Driver>;
template <class Pool, class Connection>
using PoolHandle [[deprecated("use idem::backend::PoolHandle")]] =
    backend::PoolHandle<Pool, Connection>;
}  // namespace idem
