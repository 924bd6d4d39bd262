#pragma once
// The failures of idem::amqp: the broker or the connection to it, as one idem::Error.

#include <string>

#include "idem/errors.hpp"

namespace idem::amqp {

// The broker refused an operation (a channel or connection closed with its reply code), or
// the connection to it failed (refused, lost, timed out). A Consumer reconnects after one;
// the deliveries it had not acknowledged come back from the broker.
class BrokerError : public Error {
 public:
  BrokerError(const std::string& what, int reply_code = 0) : Error(what), reply_code_(reply_code) {}

  // The AMQP reply code of a close by the broker (404 no queue, 406 precondition failed,
  // 320 connection forced...); 0 for a failure of the connection itself.
  int reply_code() const noexcept { return reply_code_; }

 private:
  int reply_code_;
};

}  // namespace idem::amqp
