#pragma once
// The events of one with_transaction try, held until the try ends
// (ClaimLedger, idem/same_transaction/claim_ledger.hpp, owns them). A try rolled back and run again would
// otherwise report its claim and its result twice: a record-last claim superseded at COMMIT was
// counted acquired and committed though the transaction that held its record rolled back.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "idem/observer.hpp"

namespace idem::same_transaction {

class HeldEvents final : public Observer {
 public:
  explicit HeldEvents(Observer* target) noexcept : target_(target) {}
  HeldEvents(const HeldEvents&) = delete;
  HeldEvents& operator=(const HeldEvents&) = delete;

  Observer* target() const noexcept { return target_; }

  // A failure goes out at once: its exception lives only during the call, and the failure
  // happened whatever the try does next. Any other event waits for the try's end.
  void on_event(const Event& e) noexcept override {
    if (e.error != nullptr) return target_->on_event(e);
    try {
      held_.push_back(Held{e.kind, std::string(e.biz_type), std::string(e.id), e.latency, e.fence,
                           e.attempts, std::string(e.reason), std::string(e.context)});
    } catch (...) {
      target_->on_event(e);  // out of memory: better early than lost
    }
  }

  // The try ended and its answers stand: every event goes out. When its transaction did not
  // commit (it rolled back as its claims asked, or the body's own exception left it), a
  // recorded success was not kept: `committed` goes out as `failed`, for rolled_back_reason.
  void deliver(bool transaction_committed) noexcept {
    for (const Held& h : held_) {
      const bool lost = !transaction_committed && h.kind == EventKind::committed;
      target_->on_event(Event{lost ? EventKind::failed : h.kind, h.biz_type, h.id, h.latency,
                              nullptr, h.fence, h.attempts,
                              lost ? rolled_back_reason : std::string_view(h.reason), h.context});
    }
    held_.clear();
  }

  static constexpr std::string_view rolled_back_reason = "idem.rolled_back";

  // The try failed with a StoreError: the caller's request is answered by the next try, or
  // by the store_error with_transaction reports; nothing of this try counts.
  void drop() noexcept { held_.clear(); }

 private:
  struct Held {
    EventKind kind;
    std::string biz_type;
    std::string id;
    std::chrono::nanoseconds latency;
    std::uint64_t fence;
    std::uint32_t attempts;
    std::string reason;
    std::string context;
  };
  Observer* target_;
  std::vector<Held> held_;
};

}  // namespace idem::same_transaction
