#pragma once
// The whole core of idem. Backends have their own headers: idem/mysql.hpp, idem/sqlite.hpp.

#include "idem/batch.hpp"
#include "idem/clock.hpp"
#include "idem/consume.hpp"
#include "idem/errors.hpp"
#include "idem/fingerprint.hpp"
#include "idem/guard.hpp"
#include "idem/janitor.hpp"
#include "idem/key.hpp"
#include "idem/memory_store.hpp"
#include "idem/memory_table.hpp"  // also state_machine.hpp and statement.hpp
#include "idem/metrics.hpp"
#include "idem/observer.hpp"
#include "idem/options.hpp"
#include "idem/outcome.hpp"
#include "idem/record.hpp"
#include "idem/run_once.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/store/record_rules.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"
