#pragma once
// idem::Ticket: proof of ownership of a claim. Every claim or takeover bumps the fence and
// draws a fresh random owner token; complete() and fail() are accepted only while both still
// match the stored record, so a worker whose lease was taken over can never overwrite the
// new owner's result (a fenced write), and an outcome lost with a connection can be
// resolved by re-reading the row (same token: it was ours).

#include <cstdint>
#include <string>

namespace idem {

struct Ticket {
  std::uint64_t fence = 0;
  std::string owner;

  friend bool operator==(const Ticket&, const Ticket&) = default;
};

}  // namespace idem
