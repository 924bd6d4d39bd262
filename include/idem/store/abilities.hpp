#pragma once
// Deprecated: moved to idem/optional_operations.hpp. This path forwards there for one release (see
// docs/changes.md) and will then be removed; include the new header.

#include "idem/optional_operations.hpp"
