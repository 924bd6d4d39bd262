#pragma once
// idem on MySQL / MariaDB. Link the CMake target idem::mysql.

#include "idem/idem.hpp"
#include "idem/mysql/connection.hpp"
#include "idem/mysql/connection_params.hpp"
#include "idem/mysql/errors.hpp"
#include "idem/mysql/janitor.hpp"
#include "idem/mysql/pool.hpp"
#include "idem/mysql/schema.hpp"
#include "idem/mysql/state_machine.hpp"
#include "idem/mysql/store.hpp"
#include "idem/mysql/transaction.hpp"
