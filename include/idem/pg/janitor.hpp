#pragma once
// idem::pg::Janitor: purge_expired + release_stale (and, with resolvers, the resolution of
// stale and outcome_unknown records) on a schedule for a PostgreSQL store.

#include "idem/janitor.hpp"
#include "idem/pg/store.hpp"

namespace idem::pg {

using Janitor = idem::Janitor<Store>;

}  // namespace idem::pg
