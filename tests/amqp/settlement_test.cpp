// How a channel's deliveries are settled as their Acks say (idem/amqp/settlement.hpp), without
// a broker.
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include <idem/amqp/settlement.hpp>

using idem::Ack;
using idem::amqp::Settlement;
using Action = Settlement::Action;
using Actions = std::vector<Action>;

namespace {

const Settlement::Clock::time_point t0{};

Ack commit() {
  return {Ack::commit, idem::Verdict::acquired, ""};
}
Ack later(int ms) {
  return {Ack::retry_later, idem::Verdict::acquired, "failed", std::chrono::milliseconds{ms}};
}
Ack dead() {
  return {Ack::dead_letter, std::nullopt, "malformed"};
}

void deliver(Settlement& s, std::initializer_list<std::uint64_t> tags) {
  for (auto t : tags)
    s.delivered(t);
}

}  // namespace

TEST_CASE("settlement: commits are acknowledged together with multiple when every tag below is") {
  Settlement s({.ack_batch = 3});
  deliver(s, {1, 2, 3, 4});
  s.settle(1, commit(), t0);
  s.settle(2, commit(), t0);
  CHECK(s.due(t0, false).empty());  // kept: fewer than ack_batch and not idle
  s.settle(3, commit(), t0);
  CHECK(s.due(t0, false) == Actions{{Action::ack, 3, true}});
  s.settle(4, commit(), t0);
  CHECK(s.due(t0, true) == Actions{{Action::ack, 4, false}});  // idle: sent at once
  CHECK(s.unsettled() == 0);
}

TEST_CASE("settlement: a held delivery keeps the tags above it out of a multiple ack") {
  Settlement s({.ack_batch = 1});
  deliver(s, {1, 2, 3, 4, 5});
  s.settle(1, commit(), t0);
  s.settle(2, later(100), t0);
  s.settle(3, commit(), t0);
  s.settle(5, commit(), t0);
  // 1 alone (a multiple ack of 3 would settle the held 2); 3 and 5 each on its own.
  CHECK(s.due(t0, true) ==
        Actions{{Action::ack, 1, false}, {Action::ack, 3, false}, {Action::ack, 5, false}});
  CHECK(s.held() == 1);
  CHECK(s.next_due() == t0 + std::chrono::milliseconds{100});
  CHECK(s.due(t0 + std::chrono::milliseconds{99}, true).empty());
  CHECK(s.due(t0 + std::chrono::milliseconds{100}, true) == Actions{{Action::requeue, 2, false}});
  CHECK_FALSE(s.next_due());
  s.settle(4, commit(), t0);
  CHECK(s.due(t0, true) == Actions{{Action::ack, 4, false}});
}

TEST_CASE("settlement: an unanswered delivery below keeps acks single and in order") {
  Settlement s({.ack_batch = 1});
  deliver(s, {7, 8, 9});
  s.settle(8, commit(), t0);
  s.settle(9, commit(), t0);
  CHECK(s.due(t0, true) == Actions{{Action::ack, 8, false}, {Action::ack, 9, false}});
  s.settle(7, commit(), t0);
  CHECK(s.due(t0, true) == Actions{{Action::ack, 7, false}});
}

TEST_CASE("settlement: dead letters are rejected at once and retry_later without delay requeued") {
  Settlement s({.ack_batch = 10});
  deliver(s, {1, 2, 3});
  s.settle(1, dead(), t0);
  s.settle(2, later(0), t0);
  s.settle(3, commit(), t0);
  CHECK(s.due(t0, false) == Actions{{Action::reject, 1, false}, {Action::requeue, 2, false}});
  // Rejects and requeues go before the acks that might cover them.
  CHECK(s.due(t0, true) == Actions{{Action::ack, 3, false}});
}

TEST_CASE("settlement: a lost channel forgets its deliveries") {
  Settlement s;
  deliver(s, {1, 2, 3});
  s.settle(1, commit(), t0);
  s.settle(2, later(1000), t0);
  CHECK(s.unsettled() == 3);
  s.reset();
  CHECK(s.unsettled() == 0);
  CHECK(s.due(t0 + std::chrono::hours{1}, true).empty());
  s.delivered(1);  // the new channel's tags start again
  CHECK(s.unsettled() == 1);
}

TEST_CASE("settlement: misuse is a typed error and changes nothing") {
  CHECK_THROWS_AS(Settlement({.ack_batch = 0}), idem::InvalidArgument);
  Settlement s;
  s.delivered(1);
  CHECK_THROWS_AS(s.delivered(1), idem::UsageError);
  CHECK_THROWS_AS(s.settle(2, commit(), t0), idem::UsageError);
  s.settle(1, commit(), t0);
  CHECK_THROWS_AS(s.settle(1, commit(), t0), idem::UsageError);
  CHECK(s.due(t0, true) == Actions{{Action::ack, 1, false}});
}
