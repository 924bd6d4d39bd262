#pragma once
// Deprecated: moved to idem/backend/store_skeleton.hpp (namespace idem::backend). This path
// forwards there for one release (see docs/changes.md) and will then be removed; include the new
// header.

#include "idem/backend/store_skeleton.hpp"

namespace idem {
template <class C, class N, class P, class O>
using BackendTypes [[deprecated("use idem::backend::BackendTypes")]] =
    backend::BackendTypes<C, N, P, O>;
template <class Backend>
using StoreSkeleton [[deprecated("use idem::backend::StoreSkeleton")]] =
    backend::StoreSkeleton<Backend>;
}  // namespace idem
