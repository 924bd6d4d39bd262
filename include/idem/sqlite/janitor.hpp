#pragma once
// idem::sqlite::Janitor: purge_expired + release_stale on a schedule for a SQLite store.

#include "idem/janitor.hpp"
#include "idem/sqlite/store.hpp"

namespace idem::sqlite {

using Janitor = idem::Janitor<Store>;

}  // namespace idem::sqlite
