#pragma once
// How idem::redis tells Redis failures apart. A StoreError from idem::redis carries in its
// Diagnostics either the client's error (from_server false, code: hiredis's REDIS_ERR_*,
// message: its text) or the server's error reply (from_server true, code 0, message: the
// reply verbatim, which begins with the error's name: "LOADING ...", "READONLY ...").

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "idem/errors.hpp"

namespace idem::redis {

namespace code {
// hiredis's client-side errors (redisContext::err).
inline constexpr unsigned io = 1;        // a read or write failed, or timed out
inline constexpr unsigned other = 2;     // e.g. the connection could not be made
inline constexpr unsigned eof = 3;       // the server closed the connection
inline constexpr unsigned protocol = 4;  // the reply could not be parsed
inline constexpr unsigned oom = 5;       // the client ran out of memory
}  // namespace code

// The name of a server error reply ("MOVED" of "MOVED 3999 127.0.0.1:6381").
constexpr std::string_view error_name(std::string_view reply) noexcept {
  return reply.substr(0, reply.find(' '));
}

// Server errors after which the command did not run and may run a moment later: a server
// loading its data after a restart, a script running too long (BUSY), a cluster moving
// slots or electing a master (a redirection still pending after the session followed a
// few), a replica that was a master a moment ago.
constexpr bool is_transient_reply(std::string_view reply) noexcept {
  const std::string_view name = error_name(reply);
  return name == "LOADING" || name == "BUSY" || name == "TRYAGAIN" || name == "CLUSTERDOWN" ||
         name == "MASTERDOWN" || name == "READONLY" || name == "MOVED" || name == "ASK";
}

// Whether a call that got this error reply may succeed if made again later: the transient
// errors, and a server out of memory under noeviction (it refuses writes until memory
// frees; the stores report it at once rather than retry).
constexpr bool is_retryable_reply(std::string_view reply) noexcept {
  return is_transient_reply(reply) || error_name(reply) == "OOM";
}

// Client errors after which the command may or may not have run: the connection broke or
// timed out after the command was written.
constexpr bool is_connection_lost(unsigned c) noexcept {
  return c == code::io || c == code::eof || c == code::other;
}

namespace detail {

// An error reply of the server at `where`, as the StoreError the stores throw.
inline StoreError server_error(std::string_view where, std::string_view reply) {
  return StoreError(fmt::format("idem::redis: {} answered: {}", where, reply),
                    is_retryable_reply(reply), Diagnostics{0, "", std::string(reply), true});
}

}  // namespace detail

}  // namespace idem::redis
