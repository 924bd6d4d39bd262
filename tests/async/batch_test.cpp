// idem::async::claim_batch: the answers of one claim after another, whether the store claims a
// batch itself or one request at a time; bad input refused before any write; the claims made
// before a failure, or by a batch whose caller was cancelled, released before it completes.
#include <array>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async/batch.hpp>
#include <idem/async/inline_store.hpp>
#include <idem/memory_store.hpp>

#include "../support/loop.hpp"

namespace net = idem::async::net;
using idem::Verdict;

namespace {

// A coroutine store with only the operations every one has (no claim_batch of its own), whose
// claim number `failing` throws.
struct SingleClaimStore {
  idem::async::InlineStore<idem::MemoryStore> inner;
  int failing = 0;
  int claims = 0;
  // Each claim first waits this long, deaf to cancellation (as a statement already sent).
  std::chrono::milliseconds deaf{0};

  net::awaitable<idem::ClaimResult> claim(const idem::Key& k, std::string_view fp,
                                          const idem::Options& o) {
    if (++claims == failing) throw idem::StoreError("connection lost", true);
    if (deaf.count() > 0) co_await idem::async::detail::to_completion(idem::async::sleep_for(deaf));
    co_return co_await inner.claim(k, fp, o);
  }
  net::awaitable<void> complete(const idem::Key& k, const idem::Ticket& t, std::string_view s) {
    return inner.complete(k, t, s);
  }
  net::awaitable<void> fail(const idem::Key& k, const idem::Ticket& t, std::string_view e, bool r) {
    return inner.fail(k, t, e, r);
  }
  net::awaitable<std::optional<idem::Record>> find(const idem::Key& k) { return inner.find(k); }
  net::awaitable<std::size_t> purge_expired(std::size_t b, std::size_t m) {
    return inner.purge_expired(b, m);
  }
  net::awaitable<std::size_t> release_stale(std::size_t b) { return inner.release_stale(b); }
};
static_assert(idem::async::AwaitableStore<SingleClaimStore>);
static_assert(!idem::async::BatchClaimingAsyncStore<SingleClaimStore>);
static_assert(idem::async::BatchClaimingAsyncStore<idem::async::InlineStore<idem::MemoryStore>>);

const std::vector<idem::ClaimRequest> requests{
    {{"PAY", "1"}, "fp"}, {{"PAY", "2"}, "fp"}, {{"PAY", "1"}, "fp"},  // 2 repeats 0
    {{"PAY", "3"}, "a"},  {{"PAY", "3"}, "b"},                         // 4 conflicts with 3
};

std::vector<Verdict> verdicts(const std::vector<idem::ClaimResult>& results) {
  std::vector<Verdict> v;
  for (const auto& r : results)
    v.push_back(r.verdict);
  return v;
}

}  // namespace

TEST_CASE(
    "async claim_batch: the answers of one claim after another, with or without the "
    "store's own claim_batch") {
  const std::vector<Verdict> expected{Verdict::acquired, Verdict::acquired, Verdict::in_progress,
                                      Verdict::acquired, Verdict::conflict};
  net::io_context io;
  idem::MemoryStore one;
  idem::async::InlineStore batching{one};
  CHECK(verdicts(idem_test::run_on(io, idem::async::claim_batch(batching, requests))) == expected);
  idem::MemoryStore two;
  SingleClaimStore single{idem::async::InlineStore{two}};
  CHECK(verdicts(idem_test::run_on(io, idem::async::claim_batch(single, requests))) == expected);
  CHECK(single.claims == 5);
}

TEST_CASE("async claim_batch: a bad request refuses the batch before any write") {
  net::io_context io;
  idem::MemoryStore memory;
  SingleClaimStore store{idem::async::InlineStore{memory}};
  const std::vector<idem::ClaimRequest> bad{{{"PAY", "1"}, "fp"}, {{"PAY", "2"}, "two words"}};
  CHECK_THROWS_AS(idem_test::run_on(io, idem::async::claim_batch(store, bad)),
                  idem::InvalidArgument);
  CHECK(store.claims == 0);
  CHECK_FALSE(memory.find({"PAY", "1"}));
}

TEST_CASE("async claim_batch: a claim failing mid-batch releases the claims made before it") {
  net::io_context io;
  idem::MemoryStore memory;
  SingleClaimStore store{idem::async::InlineStore{memory}, /*failing=*/4};
  CHECK_THROWS_AS(idem_test::run_on(io, idem::async::claim_batch(store, requests)),
                  idem::StoreError);
  for (const char* id : {"1", "2"}) {
    const auto r = memory.find({"PAY", id});
    REQUIRE(r);
    CHECK(r->status == idem::Status::failed);
    CHECK(r->retryable);
  }
  CHECK_FALSE(memory.find({"PAY", "3"}));
}

TEST_CASE(
    "async claim_batch: cancelled while it claims, it releases every claim made, even those "
    "answered after the cancellation, before it completes") {
  using namespace net::experimental::awaitable_operators;
  using namespace std::chrono_literals;
  net::io_context io;
  idem::MemoryStore memory;
  SingleClaimStore store{idem::async::InlineStore{memory}};
  store.deaf = 5ms;
  int processing_after = 0;
  const std::array<const char*, 3> ids{"1", "2", "3"};
  const bool timer_first = idem_test::run_on(io, [&]() -> net::awaitable<bool> {
    net::steady_timer timer(co_await net::this_coro::executor, 1ms);
    const auto first = co_await (idem::async::claim_batch(store, requests) ||
                                 timer.async_wait(net::use_awaitable));
    for (const char* id : ids)
      processing_after += memory.find({"PAY", id})->status == idem::Status::processing ? 1 : 0;
    co_return first.index() == 1;
  }());
  CHECK(timer_first);
  CHECK(store.claims == 5);  // every claim was made: each was deaf to the cancellation
  CHECK(processing_after == 0);
  for (const char* id : {"1", "2", "3"}) {
    const auto r = memory.find({"PAY", id});
    REQUIRE(r);
    CHECK(r->status == idem::Status::failed);
    CHECK(r->retryable);
  }
  // A caller that is not cancelled gets its claims.
  CHECK(idem_test::run_on(io, idem::async::claim_batch(store, requests))[0].verdict ==
        idem::Verdict::acquired);
}
