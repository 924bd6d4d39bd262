#pragma once
// idem::mysql::Janitor: purge_expired + release_stale on a schedule for a MySQL store.

#include "idem/janitor.hpp"
#include "idem/mysql/store.hpp"

namespace idem::mysql {

using Janitor = idem::Janitor<Store>;

}  // namespace idem::mysql
