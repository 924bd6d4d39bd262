#pragma once
// Moved: idem::mysql::AsyncBoundStore is declared in idem/mysql/async_store.hpp, over the SQL
// backends' coroutine bound store (idem/same_transaction/async_bound_sql_store.hpp). This path
// keeps working for one release (docs/changes.md).
#include "idem/mysql/async_store.hpp"
