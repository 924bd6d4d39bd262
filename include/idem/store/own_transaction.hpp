#pragma once
// Deprecated: moved to idem/same_transaction/own_transaction.hpp (namespace
// idem::same_transaction). This path forwards there for one release (see docs/changes.md) and will
// then be removed; include the new header.

#include "idem/same_transaction/own_transaction.hpp"

namespace idem {
template <class Backend, class Tx>
using OwnTransaction [[deprecated("use idem::same_transaction::OwnTransaction")]] =
    same_transaction::OwnTransaction<Backend, Tx>;
}  // namespace idem
