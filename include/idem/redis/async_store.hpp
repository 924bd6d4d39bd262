#pragma once
// idem::redis::AsyncStore: the records of idem::redis::Store, for coroutines, on AsyncPool's
// pipelined connections (idem/redis/async_pool.hpp): no thread per call, many requests in
// flight on a few connections. The same scripts, keys and decisions as the blocking store
// (RecordOps makes each script call and reads its reply; idem/backend/steps.hpp decides), the
// same retries and reconciliation of a reply lost with its connection, through the coroutine
// store skeleton (idem/backend/async_store_skeleton.hpp).
//
//   auto pool = std::make_shared<idem::redis::AsyncPool>(io.get_executor(), connection_params);
//   idem::redis::AsyncStore store{pool};
//   auto out = co_await idem::async::run_once(store, key, fp, handler);
//
// On one server or on a Redis Cluster (ConnectionParams::cluster_nodes). A blocking
// idem::redis::Store and an AsyncStore on the same prefix work side by side. Not here:
// stats(), which no coroutine store has (docs/redis.md, "Coroutines").

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/async/net.hpp"
#include "idem/async/store.hpp"
#include "idem/backend/async_store_skeleton.hpp"
#include "idem/backend/record_rules.hpp"
#include "idem/errors.hpp"
#include "idem/key.hpp"
#include "idem/options.hpp"
#include "idem/record.hpp"
#include "idem/record_query.hpp"
#include "idem/redis/async_connection.hpp"
#include "idem/redis/async_pool.hpp"
#include "idem/redis/detail/record_ops.hpp"
#include "idem/redis/store.hpp"
#include "idem/redis/store_params.hpp"
#include "idem/status.hpp"
#include "idem/store.hpp"
#include "idem/table_layout.hpp"
#include "idem/ticket.hpp"

namespace idem::redis {

namespace detail {

// RecordOps' script calls on an AsyncConnection: the keys, arguments and decoding are RecordOps'.
class AsyncRecordOps {
 public:
  explicit AsyncRecordOps(RecordOps ops) : ops_(std::move(ops)) {}

  net::awaitable<backend::InsertOrRead> insert_or_read(AsyncConnection& c, const Key& key,
                                                       std::string_view fp, const Options& o,
                                                       const std::string& token) const {
    const ScriptRequest q = ops_.claim_request(key, fp, o, token);
    const Reply r = co_await c.eval(q.script(), q.call());
    co_return ops_.claim_answer(key, fp, o, token, r);
  }

  // RecordOps::claim_chunk: up to max_batch_rows distinct keys, their claims in one pipeline.
  static constexpr std::size_t max_batch_rows = RecordOps::max_batch_rows;
  net::awaitable<std::vector<ClaimResult>> claim_chunk(
      AsyncConnection& c, std::span<const ClaimRequest* const> requests,
      std::span<const std::string> tokens, const Options& o) const {
    const std::vector<ScriptRequest> claims = ops_.claim_requests(requests, tokens, o);
    const std::vector<ScriptCall> calls = RecordOps::calls(claims);
    const std::vector<Reply> replies = co_await c.eval_all(ops_.scripts().claim, calls);
    auto answers = ops_.claim_answers(requests, tokens, o, replies);
    co_return co_await idem::async::detail::settle_batch(RecordOps::name, *this, c, requests,
                                                         tokens, o, answers);
  }

  net::awaitable<std::optional<backend::RecordRead>> read(AsyncConnection& c, const Key& key,
                                                          bool) const {
    const ScriptRequest q = ops_.read_request(key);
    const Reply r = co_await c.eval(q.script(), q.call());
    co_return ops_.read_answer(key, r);
  }

  net::awaitable<bool> write_takeover(AsyncConnection& c, backend::Decision d, const Record& next,
                                      const Ticket& read) const {
    co_return co_await written(c, ops_.takeover_request(d, next, read));
  }

  net::awaitable<bool> finish(AsyncConnection& c, const Key& key, const Ticket& t,
                              std::string_view snapshot, Status to, bool retryable) const {
    co_return co_await written(c, ops_.finish_request(key, t, snapshot, to, retryable));
  }

  net::awaitable<bool> write_repair(AsyncConnection& c, const Record& next,
                                    const Ticket& read) const {
    co_return co_await written(c, ops_.repair_request(next, read));
  }

  net::awaitable<bool> write_points(AsyncConnection& c, const Key& key, const Ticket& t,
                                    std::string_view before, std::string_view after) const {
    const auto start = std::chrono::steady_clock::now();
    const bool won = co_await written(c, ops_.points_request(key, t, before, after));
    const auto pause = RecordOps::points_backoff(won, std::chrono::steady_clock::now() - start);
    if (pause > std::chrono::nanoseconds::zero()) {
      net::steady_timer timer(co_await net::this_coro::executor, pause);
      co_await timer.async_wait(net::use_awaitable);
    }
    co_return won;
  }

  net::awaitable<std::size_t> purge(AsyncConnection& c, std::size_t batch) const {
    co_return co_await sweep(c, batch, ops_.purge_sweep());
  }
  net::awaitable<std::size_t> release(AsyncConnection& c, std::size_t batch) const {
    co_return co_await sweep(c, batch, ops_.release_sweep());
  }

  // The server is done with what connection `id` sent once a later command on it has its
  // reply (Redis runs one connection's commands in order); a connection gone since is waited
  // out in the server's client list, and killed after a second. On a cluster, `id` names a
  // session, and each link it lost with commands out is waited out so on its node; a node
  // where no server listens any more (it died: ECONNREFUSED) runs nothing of it. Any other
  // failure throws: the claim's lease runs out instead.
  net::awaitable<bool> settled(AsyncConnection& c, unsigned long id) const {
    if (!c.cluster()) {
      if (c.id() == id) {
        const std::vector<std::string_view> ping{"PING"};
        c.checked(co_await c.command(ping));
        co_return true;
      }
      // (Each argument named apart from the co_await: GCC 12 may destroy a temporary written
      // inside one twice.)
      const auto send = [&](AsyncConnection::Command command) { return c.command(command); };
      const std::string where = c.where();
      co_return co_await session_ends(send, where, id);
    }
    const std::vector<LostLinks::Lost> lost = c.lost_links(id);
    for (const LostLinks::Lost& l : lost) {
      const auto send = [&](AsyncConnection::Command command) {
        return c.command_on(l.node, command);
      };
      const std::string where = l.node.text();
      try {
        co_await session_ends(send, where, l.client);
      } catch (const ConnectionRefused&) {
        // No server on that node's port: the connection died with its process.
      }
    }
    c.settled_links(id, lost);
    co_return true;
  }

  // As RecordOps::list: the run decides, this sends its round trips.
  net::awaitable<std::vector<Record>> list(AsyncConnection& c, const RecordQuery& q) const {
    RecordOps::ListRun run(ops_, q);
    while (!run.done()) {
      const std::vector<ScriptCall> calls = run.calls();
      const std::vector<Reply> replies = co_await c.eval_all(run.script(), calls);
      run.answer(replies);
    }
    co_return std::move(run).result();
  }

  net::awaitable<TableLayout> layout_of(AsyncConnection& c) const {
    const std::vector<ScriptRequest> reads = ops_.layout_requests();
    const std::vector<ScriptCall> calls = RecordOps::calls(reads);
    const std::vector<Reply> stamps = co_await c.eval_all(ops_.scripts().get, calls);
    co_return ops_.layout_answer(stamps);
  }

  net::awaitable<std::size_t> stamp_layout(AsyncConnection& c) const {
    (void)co_await layout_of(c);  // refuses a newer idem's layout first
    const std::vector<ScriptRequest> stamps = ops_.stamp_requests();
    const std::vector<ScriptCall> calls = RecordOps::calls(stamps);
    co_return RecordOps::changed(co_await c.eval_all(ops_.scripts().stamp, calls));
  }

 private:
  static net::awaitable<bool> written(AsyncConnection& c, ScriptRequest q) {
    const Reply r = co_await c.eval(q.script(), q.call());
    co_return RecordOps::written(r);
  }

  net::awaitable<std::size_t> sweep(AsyncConnection& c, std::size_t batch,
                                    RecordOps::Sweep sweep) const {
    if (batch == 0) co_return 0;
    const std::vector<ScriptRequest> scans = ops_.due_requests(sweep, batch);
    const std::vector<ScriptCall> scan_calls = RecordOps::calls(scans);
    const std::vector<Reply> due = co_await c.eval_all(ops_.scripts().due, scan_calls);
    const std::vector<ScriptRequest> acts = ops_.act_requests(sweep, batch, due);
    const std::vector<ScriptCall> act_calls = RecordOps::calls(acts);
    co_return RecordOps::changed(co_await c.eval_all(*sweep.act, act_calls));
  }

  // Waits until the server's client `client` is gone (send() sends a command to that server).
  template <class Send>
  static net::awaitable<bool> session_ends(Send send, const std::string& where,
                                           unsigned long client) {
    const std::string id = std::to_string(client);
    co_return co_await idem::async::detail::wait_until_session_ends(
        [&]() -> net::awaitable<bool> {
          const std::vector<std::string_view> list{"CLIENT", "LIST", "ID", id};
          Reply r = co_await send(AsyncConnection::Command(list));
          if (r.is_error()) throw server_error(where, r.text());
          co_return !r.text().empty();
        },
        [&]() -> net::awaitable<void> {
          const std::vector<std::string_view> kill{"CLIENT", "KILL", "ID", id};
          (void)co_await send(AsyncConnection::Command(kill));  // an error: it ended meanwhile
        });
  }

  RecordOps ops_;
};

// idem::redis for the coroutine store skeleton: Backend's name and failure classification.
struct AsyncBackend {
  using Connection = AsyncConnection;
  using Pool = AsyncPool;
  using Ops = AsyncRecordOps;
  static constexpr std::string_view name = Backend::name;
  static backend::FailureKind classify(const StoreError& e) noexcept {
    return Backend::classify(e);
  }
};

}  // namespace detail

class AsyncStore : public backend::AsyncStoreSkeleton<detail::AsyncBackend> {
 public:
  // The store shares the pool (other stores may use it too).
  explicit AsyncStore(std::shared_ptr<AsyncPool> pool, StoreParams params = {})
      : AsyncStoreSkeleton(checked_ops(params), params.retry), pool_(std::move(pool)) {
    if (!pool_) throw InvalidArgument("idem::redis::AsyncStore: pool must not be null");
    attach(pool_.get());
    if (params.check_layout) {
      check_table_first([this](AsyncConnection& c) -> net::awaitable<void> {
        (void)co_await ops().layout_of(c);
      });
    }
  }

  // As Store::ensure_schema.
  net::awaitable<Migration> ensure_schema() {
    const Migration done = co_await with_retries_unchecked<Migration>(
        "ensure_schema", [&](AsyncConnection& c, bool) -> net::awaitable<Migration> {
          const std::size_t stamped = co_await ops().stamp_layout(c);
          const TableLayout layout = co_await ops().layout_of(c);
          co_return Migration{.layout = layout, .stamped_buckets = stamped};
        });
    table_checked();
    co_return done;
  }

  // As Store::check_schema.
  net::awaitable<TableLayout> check_schema() {
    const TableLayout layout = co_await with_retries_unchecked<TableLayout>(
        "check_schema", [&](AsyncConnection& c, bool) { return ops().layout_of(c); });
    table_checked();
    co_return layout;
  }

  AsyncPool& pool() const noexcept { return *pool_; }

 private:
  static detail::AsyncRecordOps checked_ops(const StoreParams& p) {
    detail::validate(p);
    return detail::AsyncRecordOps(
        detail::RecordOps(detail::Layout(p.prefix, p.buckets), p.keep_expired));
  }

  std::shared_ptr<AsyncPool> pool_;
};

static_assert(async::AwaitableStore<AsyncStore>);
static_assert(async::RepairingAsyncStore<AsyncStore> && async::RecoveryPointAsyncStore<AsyncStore>);
static_assert(async::ListingAsyncStore<AsyncStore> && async::BatchClaimingAsyncStore<AsyncStore>);

}  // namespace idem::redis
