#pragma once
// idem::same_transaction::SpeculativeClaims: a bound store's record-last claims
// (BoundClaim::record_last), kept in memory from the read that found no record until their
// result is INSERTed as the finished record. The rules of both bound stores (BoundSqlStore,
// idem::mysql::AsyncBoundStore), without I/O: the stores read, INSERT and note what happened.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/backend/record_rules.hpp"
#include "idem/clock.hpp"
#include "idem/detail/recovery_points.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/ticket.hpp"
#include "idem/verdict.hpp"

namespace idem::same_transaction {

// A read that also answers when there is no row: the store's `now` comes either way.
struct RecordProbe {
  std::optional<Record> record;
  TimePoint now;
};

class SpeculativeClaims {
 public:
  // A record-last claim decided on its read, which took no lock: a duplicate that holds none
  // cannot deadlock with the business of the request it duplicates. A stale snapshot is
  // harmless: a finished record only changes once it has expired, which the read's `now`
  // judges; a row the snapshot missed is met by the final INSERT.
  // The claim's answer: acquired (kept here, under `token`) when there is no record, or the
  // record's verdict; nullopt when the record is due for a takeover, which the store writes
  // first, under the row's lock (as a claim-first claim).
  std::optional<ClaimResult> claim(const Key& key, std::string_view fingerprint,
                                   const Options& options, const std::string& token,
                                   RecordProbe seen) {
    if (!seen.record) {
      Record fresh = backend::claim_record(key, token, fingerprint, seen.now, options);
      claims_.push_back({fresh});
      return ClaimResult{Verdict::acquired, std::move(fresh)};
    }
    const backend::Decision d = backend::decide(*seen.record, fingerprint, seen.now);
    if (backend::is_takeover(d)) return std::nullopt;
    return ClaimResult{backend::verdict_of(d), std::move(*seen.record)};
  }

  // The finished record to INSERT as the result of the claim (key, ticket); nullopt when it is
  // no record-last claim of this store. Throws LeaseLost (from `who`) when its record was
  // already sent: whatever that INSERT did, a claim is not written twice.
  std::optional<Record> finish(std::string_view who, const Key& key, const Ticket& ticket,
                               Status to, std::string_view snapshot, bool retryable) {
    Claim* c = find(key, ticket);
    if (c == nullptr) return std::nullopt;
    if (c->sent) throw backend::lease_lost(who, key, ticket);
    c->sent = true;
    // (The INSERT stamps updated_at with the store's now.)
    return backend::finished(c->record, to, snapshot, retryable, c->record.updated_at);
  }

  // Whether (key, ticket) is a record-last claim whose record was sent: an abandoned one of
  // those has nothing more to record.
  bool sent(const Key& key, const Ticket& ticket) const noexcept {
    const Claim* c = find(key, ticket);
    return c != nullptr && c->sent;
  }

  // A step's result (idem/attempt.hpp), kept with the claim until its record is INSERTed;
  // the recovery points after it. nullopt when (key, ticket) is no record-last claim of this
  // store; throws LeaseLost once its record was sent.
  std::optional<std::string> record_step(std::string_view who, const Key& key, const Ticket& ticket,
                                         std::string_view step, std::string_view result) {
    Claim* c = find(key, ticket);
    if (c == nullptr) return std::nullopt;
    if (c->sent) throw backend::lease_lost(who, key, ticket);
    c->record.recovery_points = idem::detail::with_step(c->record.recovery_points, step, result);
    return c->record.recovery_points;
  }

 private:
  struct Claim {
    Record record;
    bool sent = false;
  };

  Claim* find(const Key& key, const Ticket& ticket) noexcept {
    for (Claim& c : claims_) {
      if (c.record.ticket == ticket && c.record.key == key) return &c;
    }
    return nullptr;
  }
  const Claim* find(const Key& key, const Ticket& ticket) const noexcept {
    return const_cast<SpeculativeClaims*>(this)->find(key, ticket);
  }

  std::vector<Claim> claims_;
};

}  // namespace idem::same_transaction
