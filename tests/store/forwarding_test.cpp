// The old include paths of idem/store/ (and the other moved or renamed names of
// docs/changes.md) still compile for one release and name the same entities as the new ones.
#include <type_traits>

#include <catch2/catch.hpp>

#include <idem/async/guard.hpp>
#include <idem/async/inline_store.hpp>
#include <idem/async/pool.hpp>
#include <idem/async/skeleton.hpp>
#include <idem/memory_store.hpp>
#include <idem/mysql/async_store.hpp>
#include <idem/mysql/execute.hpp>
#include <idem/mysql/store.hpp>
#include <idem/mysql/transaction.hpp>
#include <idem/sqlite/apply.hpp>
#include <idem/sqlite/store.hpp>
#include <idem/store/abilities.hpp>
#include <idem/store/own_transaction.hpp>
#include <idem/store/pool.hpp>
#include <idem/store/record_rules.hpp>
#include <idem/store/retry.hpp>
#include <idem/store/skeleton.hpp>
#include <idem/store/sql_store.hpp>
#include <idem/store/steps.hpp>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using MemoryAsync = idem::async::InlineStore<idem::MemoryStore>;
struct ForwardingLender {
  void operator()(auto&& use) const { use(nullptr); }
};

static_assert(std::is_same_v<idem::Decision, idem::backend::Decision>);
static_assert(std::is_same_v<idem::FailureKind, idem::backend::FailureKind>);
static_assert(std::is_same_v<idem::RecordRead, idem::backend::RecordRead>);
static_assert(std::is_same_v<idem::InsertOrRead, idem::backend::InsertOrRead>);
static_assert(std::is_same_v<idem::PoolUse, idem::backend::ConnectionPurpose>);
static_assert(std::is_same_v<idem::RecordProbe, idem::same_transaction::RecordProbe>);
static_assert(std::is_same_v<idem::StoreSkeleton<idem::mysql::detail::Backend>,
                             idem::backend::StoreSkeleton<idem::mysql::detail::Backend>>);
static_assert(std::is_same_v<idem::BasicPool<idem::sqlite::detail::PoolDriver>,
                             idem::backend::BasicPool<idem::sqlite::detail::PoolDriver>>);
static_assert(std::is_same_v<idem::async::StoreSkeleton<idem::mysql::detail::AsyncBackend>,
                             idem::backend::AsyncStoreSkeleton<idem::mysql::detail::AsyncBackend>>);
static_assert(std::is_same_v<idem::async::BasicPool<idem::mysql::detail::AsyncPoolDriver>,
                             idem::backend::AsyncBasicPool<idem::mysql::detail::AsyncPoolDriver>>);
static_assert(
    std::is_same_v<idem::BoundSqlStore<idem::sqlite::detail::Backend>, idem::sqlite::BoundStore>);
static_assert(std::is_same_v<idem::OwnTransaction<idem::mysql::detail::Backend,
                                                  idem::mysql::detail::ConnectionTry>,
                             idem::mysql::Transaction>);
static_assert(
    std::is_same_v<idem::async::Guard<MemoryAsync>, idem::async::IdempotencyGuard<MemoryAsync>>);
static_assert(idem::async::AsyncStore<MemoryAsync> && idem::async::AwaitableStore<MemoryAsync>);
static_assert(idem::mysql::lends_connection<ForwardingLender> &&
              idem::mysql::ConnectionLender<ForwardingLender>);
static_assert(idem::AbandoningStore<idem::sqlite::BoundStore>);

}  // namespace

TEST_CASE("forwarding: the old paths' functions are the new ones") {
  const idem::Options options;
  const auto now = idem::system_now();
  const idem::Record r = idem::claim_record({"PAY", "F-1"}, "owner", "fp", now, options);
  CHECK(idem::decide(r, "fp", now) == idem::backend::decide(r, "fp", now));
  CHECK(idem::holds(r, r.ticket));
  idem::RetryPolicy policy;
  CHECK(idem::retry(policy, "test", "forwarding", [](int attempt) { return attempt; }) == 1);
}

#pragma GCC diagnostic pop
