#pragma once
// idem::http: the Idempotency-Key header (IETF draft) for any HTTP library. See docs/http.md.

#include "idem/http/handle.hpp"
#include "idem/http/idempotency_key.hpp"
#include "idem/http/message.hpp"
#include "idem/http/policy.hpp"
#include "idem/http/problem.hpp"
#include "idem/http/request_identity.hpp"
