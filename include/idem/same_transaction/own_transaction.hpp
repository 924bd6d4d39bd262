#pragma once
// idem::same_transaction::OwnTransaction: one transaction on the service's own connection, as an
// object (in the manner of libpqxx's `work`). Made, it begins a transaction unless one is open on
// the handle; it is the bound store the transaction's guards claim through; commit() ends it as a
// try of with_transaction ends; destroyed before that, it rolls back. The SQL backends name it
// idem::mysql::Transaction and idem::sqlite::Transaction:
//
//   idem::mysql::Transaction tx(store, mysql);  // START TRANSACTION on the service's MYSQL*
//   const auto out = idem::run_once(tx, key, fp, [&] { ...business writes on mysql...; });
//   tx.commit();
//
// commit(), by how the transaction's claims ended (idem/same_transaction/claim_ledger.hpp):
//  - every claim succeeded or failed permanently (or there was none): COMMIT;
//  - they failed retryably (the outcome the caller holds says so): ROLLBACK, so that no
//    business write stays behind for the redelivery to run on top of; committed() is false;
//  - a claim was left processing or abandoned, or finished claims share the transaction with
//    a retryable one: ROLLBACK and UsageError naming the claim;
//  - a record-last claim was superseded: ROLLBACK and a retryable StoreError (run it again:
//    the next claim replays the other request's result).
// It is one try: a transient failure (a deadlock, a lost connection) leaves as a retryable
// StoreError, after the rollback, and the caller decides whether to run it all again
// (idem::retry with a RetryPolicy does so; with_transaction is the form that runs the body
// again by itself). Claim through the transaction itself, not through another store.bind()
// of the same handle: that one keeps a ledger of its own.

#include <exception>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "idem/errors.hpp"
#include "idem/same_transaction/bound_sql_store.hpp"
#include "idem/same_transaction/claim_ledger.hpp"
#include "idem/same_transaction/transaction_try.hpp"

namespace idem::same_transaction {

// The ledger of an OwnTransaction, made before the bound store that notes claims in it.
struct OwnLedger {
  ClaimLedger ledger;
};

// Backend: as BoundSqlStore's (idem/same_transaction/bound_sql_store.hpp). Tx: how to begin, commit
// and roll back on the bound Connection (see same_transaction::run_try), made as Tx{connection}.
template <class Backend, class Tx>
class OwnTransaction : private same_transaction::OwnLedger, public BoundSqlStore<Backend> {
  using Bound = BoundSqlStore<Backend>;

 public:
  using Native = typename Backend::Native;
  using Connection = typename Backend::Connection;

  // On the caller's handle, bound as store.bind(handle) binds. The store and the handle must
  // outlive the transaction.
  template <class Store>
  OwnTransaction(const Store& store, Native* handle)
      : Bound(bound_to(store, checked(handle), ledger)),
        who_(fmt::format("{}::Transaction", Backend::name)),
        tx_{this->connection()} {
    if (!Backend::in_transaction(this->connection())) tx_.begin();
  }
  OwnTransaction(const OwnTransaction&) = delete;
  OwnTransaction& operator=(const OwnTransaction&) = delete;
  ~OwnTransaction() {
    if (ended_) return;
    ledger.rolled_back();
    tx_.roll_back_quietly();
  }

  // Ends the transaction as its claims say (see above). Throws UsageError when it already
  // ended, or when a claim forbids the commit (after the rollback); a StoreError from the
  // COMMIT or the ROLLBACK leaves after a rollback.
  void commit() {
    end();
    try {
      committed_ = same_transaction::end_try(tx_, ledger, who_);
    } catch (...) {
      same_transaction::TryReport nobody;  // the guards reported their own claims
      same_transaction::abort_try(tx_, ledger, nobody, std::current_exception(), who_);
    }
  }

  // Rolls back whatever the claims say. Throws UsageError when the transaction already ended.
  void roll_back() {
    end();
    ledger.rolled_back();
    tx_.roll_back();
  }

  // Whether commit() committed (false also after a rollback it chose).
  bool committed() const noexcept { return committed_; }

 private:
  template <class Store>
  static Bound bound_to(const Store& store, Native* handle, same_transaction::ClaimLedger& ledger) {
    const same_transaction::LedgerScope scope(handle,
                                              ledger);  // the bound store notes its claims there
    return store.bind(handle);
  }
  static Native* checked(Native* handle) {
    if (handle == nullptr) {
      throw InvalidArgument(fmt::format("{}::Transaction: the handle is null", Backend::name));
    }
    return handle;
  }
  void end() {
    if (ended_) throw UsageError(fmt::format("{}: the transaction already ended", who_));
    ended_ = true;
  }

  std::string who_;
  Tx tx_;
  bool ended_ = false;
  bool committed_ = false;
};

}  // namespace idem::same_transaction
