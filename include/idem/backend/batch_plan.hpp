#pragma once
// BatchPlan: in what order, and how many at a time, a store's claim_batch sends a batch's keys.
// Written once, without I/O, for the blocking store skeleton (idem/backend/store_skeleton.hpp)
// and the coroutine one (idem/backend/async_store_skeleton.hpp), which only send its chunks:
//
//   BatchPlan plan(requests, options, Ops::max_batch_rows);  // validates: bad input writes nothing
//   while (plan.more_chunks()) {  // each chunk tried with retries; a failed try calls narrow()
//     const auto chunk = plan.chunk();
//     plan.claimed(ops.claim_chunk(c, chunk.requests, chunk.tokens, options));
//   }
//   for (std::size_t i : plan.repeats())
//     plan.answer(i, claim(requests[i].key, requests[i].fingerprint, options));
//   return std::move(plan).results();
//
// results()[i] is what claim() would have answered for requests[i] had the requests been claimed
// one after another: distinct keys go in primary key order (concurrent batches then lock rows in
// the same order), and a key repeated within the batch is claimed on its own after them, so it
// meets its first occurrence's claim.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "idem/detail/token.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/store.hpp"
#include "idem/verdict.hpp"

namespace idem::backend {

class BatchPlan {
 public:
  // Checks every request and the options before anything is sent (InvalidArgument).
  BatchPlan(std::span<const ClaimRequest> requests, const Options& options, std::size_t max_rows)
      : requests_(requests), slots_(requests.size()), max_rows_(max_rows), width_(max_rows) {
    idem::detail::validate_batch(requests, options);
    if (max_rows == 0) throw InvalidArgument("idem: a batch chunk needs at least one row");
    std::unordered_map<Key, std::size_t> seen;
    for (std::size_t i = 0; i < requests.size(); ++i)
      (seen.emplace(requests[i].key, i).second ? firsts_ : repeats_).push_back(i);
    std::sort(firsts_.begin(), firsts_.end(), [&](std::size_t a, std::size_t b) {
      return std::tie(requests[a].key.id(), requests[a].key.biz_type()) <
             std::tie(requests[b].key.id(), requests[b].key.biz_type());
    });
    // One owner token per key for the whole call: a retried chunk recognises the rows an earlier
    // try created before its answer was lost.
    tokens_.resize(firsts_.size());
    for (auto& token : tokens_)
      token = idem::detail::new_owner_token();
  }

  bool more_chunks() const noexcept { return begin_ < firsts_.size(); }

  // The keys to send next, at the current width (after a failed try, the first of the same
  // keys), and their owner tokens (tokens[k] for requests[k]); valid until the next chunk().
  struct Chunk {
    std::span<const ClaimRequest* const> requests;
    std::span<const std::string> tokens;
  };
  Chunk chunk() {
    end_ = std::min(firsts_.size(), begin_ + width_);
    reach_ = std::max(reach_, end_);
    chunk_.clear();
    for (std::size_t k = begin_; k < end_; ++k)
      chunk_.push_back(&requests_[firsts_[k]]);
    return {chunk_, std::span(tokens_).subspan(begin_, end_ - begin_)};
  }

  // A try of the chunk failed. A deadlock or a lost certification rolls a whole statement back,
  // and under contention a wide one keeps meeting other writers (on Galera it can lose eight
  // times running): the next try sends half as many keys.
  void narrow() noexcept { width_ = std::max<std::size_t>(1, width_ / 2); }

  // The chunk's answers, in its order (answers[k] for chunk().requests[k]); a clean try lets the next
  // chunk be twice as wide, up to max_rows.
  void claimed(std::vector<ClaimResult> answers) {
    if (answers.size() != end_ - begin_) {
      throw CorruptRecord("idem: a batch chunk answered a different number of claims");
    }
    for (std::size_t k = begin_; k < end_; ++k)
      slots_[firsts_[k]] = std::move(answers[k - begin_]);
    begin_ = end_;  // (reach_ stays: a wider try may have sent keys past the answered ones)
    width_ = std::min(max_rows_, width_ * 2);
  }

  // The requests whose key an earlier request of the batch has: claimed one at a time, after
  // every chunk, each answered with answer(i, ...).
  const std::vector<std::size_t>& repeats() const noexcept { return repeats_; }
  void answer(std::size_t i, ClaimResult result) { slots_[i] = std::move(result); }

  // The keys a try sent that have no answer yet, each with its token: after a batch failed or
  // was cut off, the claims of theirs that may have landed are the rows that carry their token.
  std::vector<std::pair<Key, std::string>> in_flight() const {
    std::vector<std::pair<Key, std::string>> sent;
    for (std::size_t k = begin_; k < reach_; ++k)
      sent.emplace_back(requests_[firsts_[k]].key, tokens_[k]);
    return sent;
  }

  // The claims the answers so far acquired (what a batch that fails must release).
  std::vector<ClaimResult> acquired() const {
    std::vector<ClaimResult> made;
    for (const auto& slot : slots_)
      if (slot && slot->verdict == Verdict::acquired) made.push_back(*slot);
    return made;
  }

  // Every request's answer, in request order; call when no chunk and no repeat is left.
  std::vector<ClaimResult> results() && {
    std::vector<ClaimResult> out;
    out.reserve(slots_.size());
    for (auto& slot : slots_) {
      if (!slot) throw UsageError("idem: a batch's results were taken before every answer");
      out.push_back(std::move(*slot));
    }
    return out;
  }

 private:
  std::span<const ClaimRequest> requests_;
  std::vector<std::optional<ClaimResult>> slots_;  // by request
  std::vector<std::size_t> firsts_;                // each key's first request, in key order
  std::vector<std::size_t> repeats_;
  std::vector<std::string> tokens_;  // by position in firsts_
  std::vector<const ClaimRequest*> chunk_;
  std::size_t max_rows_;
  std::size_t width_;
  std::size_t begin_ = 0;  // the current chunk: firsts_[begin_, end_)
  std::size_t end_ = 0;
  std::size_t reach_ = 0;  // the end of the widest try so far
};

}  // namespace idem::backend
