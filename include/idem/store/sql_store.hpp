#pragma once
// Deprecated: moved to idem/same_transaction/bound_sql_store.hpp (namespace idem::same_transaction)
// and idem/bound_claim.hpp. This path forwards there for one release (see docs/changes.md) and will
// then be removed; include the new header.

#include "idem/bound_claim.hpp"
#include "idem/same_transaction/bound_sql_store.hpp"

namespace idem {
template <class Backend>
using BoundSqlStore [[deprecated("use idem::same_transaction::BoundSqlStore")]] =
    same_transaction::BoundSqlStore<Backend>;
using RecordProbe [[deprecated("use idem::same_transaction::RecordProbe")]] =
    same_transaction::RecordProbe;
}  // namespace idem
