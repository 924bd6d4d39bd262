#pragma once
// Deprecated: moved to idem/retry.hpp and idem/retry_policy.hpp. This path forwards there for one
// release (see docs/changes.md) and will then be removed; include the new header.

#include "idem/retry.hpp"
#include "idem/retry_policy.hpp"
