#pragma once
// The order lifecycle that the StateMachine tests drive on each SQL backend.
#include <string>
#include <vector>

#include <idem/state_machine.hpp>

namespace idem_test {

enum class OrderStatus { pending = 0, paid = 1, completed = 2, refunded = 3 };

inline const std::vector<idem::Transition<OrderStatus>> order_moves = {
    {OrderStatus::pending, OrderStatus::paid},
    {OrderStatus::paid, OrderStatus::completed},
    {OrderStatus::paid, OrderStatus::refunded}};

inline std::string order_name(OrderStatus s) {
  switch (s) {
    case OrderStatus::pending:
      return "PENDING";
    case OrderStatus::paid:
      return "PAID";
    case OrderStatus::completed:
      return "COMPLETED";
    case OrderStatus::refunded:
      return "REFUNDED";
  }
  return "?";
}

// The machine of the tests: the order table, its key, and a version column.
inline idem::StateMachine<OrderStatus> order_machine(const std::string& table = "t_order") {
  return {{.table = table, .key_column = "order_no", .version_column = "version"}, order_moves};
}

}  // namespace idem_test
