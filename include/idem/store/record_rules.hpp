#pragma once
// Deprecated: moved to idem/backend/record_rules.hpp (namespace idem::backend). This path forwards
// there for one release (see docs/changes.md) and will then be removed; include the new header.

#include "idem/backend/record_rules.hpp"

namespace idem {
using Decision [[deprecated("use idem::backend::Decision")]] = backend::Decision;
using backend::claim_record;
using backend::decide;
using backend::finished;
using backend::finished_as;
using backend::holds;
using backend::is_expired;
using backend::is_stale;
using backend::is_takeover;
using backend::lease_lost;
using backend::released;
using backend::take_over;
using backend::verdict_of;
}  // namespace idem
