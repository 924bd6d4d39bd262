#pragma once
// Asks a retry step (idem::backend::RetryLoop, OperationTries, TransactionTries) about a failed
// try as a driver does: from the handler of the try's exception, where it may rethrow it.
#include <idem/errors.hpp>

namespace idem_test {

template <class Tries>
auto failed_try(Tries& tries, const idem::StoreError& e) {
  try {
    throw e;
  } catch (const idem::StoreError& thrown) {
    return tries.failed(thrown);
  }
}

}  // namespace idem_test
