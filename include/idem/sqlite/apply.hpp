#pragma once
// Deprecated: moved to idem/sqlite/state_machine.hpp. This path forwards there for one release (see
// docs/changes.md) and will then be removed; include the new header.

#include "idem/sqlite/state_machine.hpp"
