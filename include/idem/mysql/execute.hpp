#pragma once
// Deprecated: moved to idem/mysql/state_machine.hpp. This path forwards there for one release (see
// docs/changes.md) and will then be removed; include the new header.

#include "idem/mysql/state_machine.hpp"
