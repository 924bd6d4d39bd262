#pragma once
// Deprecated: moved to idem/backend/async_store_skeleton.hpp (idem::backend::AsyncStoreSkeleton,
// beside the blocking StoreSkeleton). This path forwards there for one release (see
// docs/changes.md) and will then be removed; include the new header.

#include "idem/backend/async_store_skeleton.hpp"

namespace idem::async {
template <class Backend>
using StoreSkeleton [[deprecated("use idem::backend::AsyncStoreSkeleton")]] =
    backend::AsyncStoreSkeleton<Backend>;
}  // namespace idem::async
