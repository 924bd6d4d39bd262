#pragma once
// Deprecated: moved to idem/backend/steps.hpp (namespace idem::backend). This path forwards there
// for one release (see docs/changes.md) and will then be removed; include the new header.

#include "idem/backend/steps.hpp"

namespace idem {
using FailureKind [[deprecated("use idem::backend::FailureKind")]] = backend::FailureKind;
using RecordRead [[deprecated("use idem::backend::RecordRead")]] = backend::RecordRead;
using InsertOrRead [[deprecated("use idem::backend::InsertOrRead")]] = backend::InsertOrRead;
}  // namespace idem
