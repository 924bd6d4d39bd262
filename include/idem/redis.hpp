#pragma once
// idem on Redis. Link the CMake target idem::redis.

#include "idem/idem.hpp"
#include "idem/redis/connection.hpp"
#include "idem/redis/connection_params.hpp"
#include "idem/redis/errors.hpp"
#include "idem/redis/pool.hpp"
#include "idem/redis/reply.hpp"
#include "idem/redis/store.hpp"
