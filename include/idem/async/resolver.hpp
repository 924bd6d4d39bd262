#pragma once
// idem::async::ResolverCall: a resolver (idem::Resolvers, idem/resolver.hpp) asked from a
// coroutine without blocking its loop. Resolvers::resolve blocks its caller for up to the
// resolver's time limit, so the call runs it on a thread of its own and the coroutine waits
// on its executor for the answer:
//
//   idem::async::ResolverCall call(resolvers, record, co_await net::this_coro::executor);
//   const idem::Resolution answer = co_await call.answer();
//
// A cancelled wait ends the wait, not the call: the thread finishes on its own (within the
// resolver's time limit, which Resolvers enforces), and a later answer() of the same call
// still gets the answer. The call keeps its executor's loop from running out of work until its
// thread ended, so a loop run to its end outlives every resolver call it started; `resolvers`
// must live as long (as any Options::resolvers, it is the service's).

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "idem/async/net.hpp"
#include "idem/record.hpp"
#include "idem/resolver.hpp"

namespace idem::async {

namespace detail {

// What a resolver call's thread shares with the coroutines waiting for its answer.
class ResolverState {
 public:
  using Answer = std::optional<Resolution>;  // nullopt: the wait was cancelled

  // The answer, once known: handed to the waiter, if one waits.
  void answered(Resolution answer) {
    std::unique_ptr<Waiter> waiter;
    {
      std::lock_guard lock(mutex_);
      answer_.emplace(std::move(answer));
      waiter = std::move(waiter_);
    }
    if (waiter) waiter->complete(*answer_);  // answer_ never changes once set
  }

  template <class Handler>
  void wait(Handler handler, const std::shared_ptr<ResolverState>& self) {
    auto slot = net::get_associated_cancellation_slot(handler);
    {
      std::unique_lock lock(mutex_);
      if (!answer_) {
        if (slot.is_connected()) {
          slot.assign([weak = std::weak_ptr<ResolverState>(self)](net::cancellation_type) {
            if (auto state = weak.lock()) state->cancel();
          });
        }
        waiter_ = std::make_unique<WaiterFor<Handler>>(std::move(handler));
        return;
      }
    }
    WaiterFor<Handler>(std::move(handler)).complete(answer_);
  }

 private:
  struct Waiter {
    virtual ~Waiter() = default;
    virtual void complete(Answer answer) = 0;
  };

  // A waiting coroutine's handler, with a claim on its executor's work (a loop does not end
  // under a waiting coroutine).
  template <class Handler>
  class WaiterFor final : public Waiter {
   public:
    explicit WaiterFor(Handler handler)
        : handler_(std::move(handler)),
          work_(net::prefer(net::get_associated_executor(handler_),
                            net::execution::outstanding_work.tracked)) {}

    // Resumes the waiter on its own executor, never inside this call.
    void complete(Answer answer) override {
      auto executor = net::get_associated_executor(handler_);
      net::post(executor,
                [h = std::move(handler_), a = std::move(answer), w = std::move(work_)]() mutable {
                  net::get_associated_cancellation_slot(h).clear();
                  const boost::system::error_code ec =
                      a ? boost::system::error_code{} : net::error::operation_aborted;
                  std::move(h)(ec, std::move(a));
                });
    }

   private:
    using Work =
        std::decay_t<decltype(net::prefer(std::declval<net::associated_executor_t<Handler>>(),
                                          net::execution::outstanding_work.tracked))>;
    Handler handler_;
    Work work_;
  };

  void cancel() {
    std::unique_ptr<Waiter> waiter;
    {
      std::lock_guard lock(mutex_);
      waiter = std::move(waiter_);
    }
    if (waiter) waiter->complete(std::nullopt);
  }

  std::mutex mutex_;
  std::optional<Resolution> answer_;
  std::unique_ptr<Waiter> waiter_;
};

}  // namespace detail

class ResolverCall {
 public:
  // Starts resolvers.resolve(record) on a thread of its own. One that cannot start answers
  // unknown, as Resolvers does for its own thread.
  ResolverCall(const Resolvers& resolvers, Record record, net::any_io_executor executor)
      : state_(std::make_shared<detail::ResolverState>()) {
    try {
      std::thread([&resolvers, record = std::move(record), state = state_,
                   work =
                       net::prefer(executor, net::execution::outstanding_work.tracked)]() mutable {
        state->answered(resolvers.resolve(record));
        state.reset();  // before the work ends: the loop may end with it
        work = net::any_io_executor{};
      }).detach();
    } catch (const std::exception& e) {
      state_->answered(
          Resolution::unknown(fmt::format("the resolver could not be run: {}", e.what())));
    }
  }

  // The answer, waited for on the calling coroutine's executor. One wait at a time. A
  // cancelled wait throws boost::system::system_error (operation_aborted); the call goes on.
  net::awaitable<Resolution> answer() {
    std::optional<Resolution> got =
        co_await net::async_initiate<const net::use_awaitable_t<>&,
                                     void(boost::system::error_code, std::optional<Resolution>)>(
            [](auto handler, std::shared_ptr<detail::ResolverState> state) {
              state->wait(std::move(handler), state);
            },
            net::use_awaitable, state_);
    co_return std::move(*got);
  }

 private:
  std::shared_ptr<detail::ResolverState> state_;
};

// The resolver's answer for `record` (see Resolvers::resolve), without blocking the loop.
inline net::awaitable<Resolution> resolve(const Resolvers& resolvers, Record record) {
  ResolverCall call(resolvers, std::move(record), co_await net::this_coro::executor);
  co_return co_await call.answer();
}

}  // namespace idem::async
