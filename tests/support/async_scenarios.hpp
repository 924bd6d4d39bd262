#pragma once
// The races every coroutine store runs from one loop thread (tests/mysql/async_test.cpp,
// tests/pg/async_store_test.cpp): a request storm, a timer beside claims in flight, clients
// retrying through a killer's work, requests cancelled at random points, and the same storm and
// cancellations for batches (claim_batch, consume_batch). Each returns what
// happened; the test states what must hold, and reads its own table. Each runs on test_loop()
// (loop.hpp).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <idem/async.hpp>

#include "batch_states.hpp"
#include "loop.hpp"
#include "workload.hpp"

namespace idem_test {

namespace async_net = idem::async::net;

inline async_net::awaitable<void> async_pause(std::chrono::milliseconds d) {
  co_await idem::async::sleep_for(d);
}

struct AsyncStormResult {
  int answered = 0;     // with the request's own result, run or replayed
  int in_progress = 0;  // a duplicate that outwaited its wait
  std::vector<std::string> errors;
  std::string first_error() const { return errors.empty() ? std::string() : errors.front(); }
};

// Every request of `storm` at once on one loop thread, each a run_once whose business counts
// itself in `executions` and takes 1-3 ms.
template <class Store>
AsyncStormResult async_storm(Store& store, const Storm& storm, Executions& executions) {
  async_net::io_context& io = test_loop();
  io.restart();
  AsyncStormResult result;
  for (int k : storm.order) {
    async_net::co_spawn(
        io,
        [&, k]() -> async_net::awaitable<void> {
          const std::string id = "S-" + std::to_string(k);
          auto body = [&]() -> async_net::awaitable<int> {
            executions.executed(id);
            co_await async_pause(std::chrono::milliseconds(1 + k % 3));
            co_return k;
          };
          try {
            const auto out = co_await idem::async::run_once(store, {"PAY", id}, "fp", body,
                                                            {.wait = std::chrono::seconds(10)});
            if (out && out.value() == k) ++result.answered;
            if (out.verdict() == idem::Verdict::in_progress) ++result.in_progress;
          } catch (const std::exception& e) {
            result.errors.push_back(e.what());
          }
        },
        async_net::detached);
  }
  io.run();
  return result;
}

// What a storm on a healthy server shows: no error, every request answered (its own result, or
// a duplicate that outwaited its wait), every key run once.
inline void check_storm(const AsyncStormResult& r, const Storm& storm, Executions& executions) {
  INFO(r.first_error());
  CHECK(r.errors.empty());
  CHECK(r.answered + r.in_progress == static_cast<int>(storm.order.size()));
  CHECK(executions.total() == storm.distinct);
  CHECK(executions.max_per_key() == 1);
}

struct TicksResult {
  int done = 0;             // clients that finished their requests
  int most_in_flight = 0;   // claims out at once, at the most
  int ticks = 0;            // 1 ms timer firings
  int ticks_in_flight = 0;  // of them, while a claim was out
  long long latest_us = 0;  // the latest a firing came
};

// `clients` coroutines share `requests` run_once calls (biz type TICK) while a 1 ms timer runs
// on the same loop. What a blocking store would break, without judging by the clock (a loaded
// sanitizer run can be late by any amount): a claim that blocked the loop would hold it until
// its answer, so no other claim could start meanwhile and the timer could not fire while one
// is out.
template <class Store>
TicksResult ticks_while_claiming(Store& store, int clients, int requests) {
  async_net::io_context& io = test_loop();
  io.restart();
  TicksResult r;
  int in_flight = 0;
  std::chrono::nanoseconds worst{0};
  for (int i = 0; i < clients; ++i) {
    async_net::co_spawn(
        io,
        [&, i]() -> async_net::awaitable<void> {
          for (int n = i; n < requests; n += clients) {
            auto body = [n]() -> async_net::awaitable<int> { co_return n; };
            r.most_in_flight = std::max(r.most_in_flight, ++in_flight);
            co_await idem::async::run_once(store, {"TICK", std::to_string(n)}, "fp", body);
            --in_flight;
          }
          ++r.done;
        },
        async_net::detached);
  }
  async_net::co_spawn(
      io,
      [&]() -> async_net::awaitable<void> {
        async_net::steady_timer timer(co_await async_net::this_coro::executor);
        while (r.done < clients) {
          const auto due = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
          timer.expires_at(due);
          co_await timer.async_wait(async_net::use_awaitable);
          worst = std::max(worst, std::chrono::steady_clock::now() - due);
          ++r.ticks;
          if (in_flight > 0) ++r.ticks_in_flight;
        }
      },
      async_net::detached);
  io.run();
  r.latest_us = std::chrono::duration_cast<std::chrono::microseconds>(worst).count();
  return r;
}

struct RetryingClientsResult {
  int failed_calls = 0;  // calls that threw (each retried by its client)
  std::string first_failure;
};

// `clients` coroutines on one loop send the requests of `storm` (biz type PAY, keys "K-n"),
// each sending its next request once the last one has its answer; a request's call that
// throws StoreError is tried again after 5 ms, as a gateway would, up to 50 times. A storm
// queued for the pool all at once would make the last in line outwait the pool's
// acquire_timeout in a sanitizer build while a killer replaces connections, and a result whose
// recording fails that way runs again by design (docs/reliability.md).
template <class Store>
RetryingClientsResult retrying_clients(Store& store, const Storm& storm, int clients,
                                       Executions& executions) {
  async_net::io_context& io = test_loop();
  io.restart();
  RetryingClientsResult r;
  std::size_t next = 0;
  for (int client = 0; client < clients; ++client) {
    async_net::co_spawn(
        io,
        [&]() -> async_net::awaitable<void> {
          while (next < storm.order.size()) {
            const int k = storm.order[next++];
            const std::string id = "K-" + std::to_string(k);
            auto body = [&]() -> async_net::awaitable<int> {
              executions.executed(id);
              co_return k;
            };
            for (int attempt = 0; attempt < 50; ++attempt) {
              try {
                const auto out = co_await idem::async::run_once(store, {"PAY", id}, "fp", body,
                                                                {.wait = std::chrono::seconds(10)});
                if (out) break;
              } catch (const idem::StoreError& e) {
                if (r.failed_calls++ == 0) r.first_failure = e.what();
              }
              co_await async_pause(std::chrono::milliseconds(5));
            }
          }
        },
        async_net::detached);
  }
  io.run();
  return r;
}

struct CancelResult {
  int requests = 0;   // sent in the cancelled rounds
  int cancelled = 0;  // cut by their timer
  int finished = 0;   // answered before it
  int rounds = 0;
  // Read right after the cancelled call returned: a processing claim of its key (the claim's
  // clean-up or the guard's abandon had not been written yet).
  int processing_after = 0;
};

// How a request is cancelled: the three ways a service's code does it.
enum class CancelWay { either_operator, parallel_group, signal };

// `work` raced against `timer`, cancelled `way`: its answer, or nullopt when the timer won.
template <class T>
async_net::awaitable<std::optional<T>> raced_against(async_net::awaitable<T> work,
                                                     async_net::steady_timer& timer,
                                                     CancelWay way) {
  namespace experimental = async_net::experimental;
  switch (way) {
    case CancelWay::either_operator: {
      using namespace experimental::awaitable_operators;
      auto first = co_await (std::move(work) || timer.async_wait(async_net::use_awaitable));
      if (first.index() == 1) co_return std::nullopt;
      co_return std::move(std::get<0>(first));
    }
    case CancelWay::parallel_group: {
      auto [order, work_error, answer, timer_error] =
          co_await experimental::make_parallel_group(
              async_net::co_spawn(co_await async_net::this_coro::executor, std::move(work),
                                  async_net::deferred),
              timer.async_wait(async_net::deferred))
              .async_wait(experimental::wait_for_one(), async_net::use_awaitable);
      if (order[0] == 1) co_return std::nullopt;
      if (work_error) std::rethrow_exception(work_error);
      co_return std::move(answer);
    }
    case CancelWay::signal: {
      // Shared with the timer's handler, which may run after this frame ends.
      auto signal = std::make_shared<async_net::cancellation_signal>();
      timer.async_wait([signal](boost::system::error_code e) {
        if (!e) signal->emit(async_net::cancellation_type::terminal);
      });
      std::optional<T> answer;
      std::exception_ptr error;
      try {
        answer = co_await async_net::co_spawn(
            co_await async_net::this_coro::executor, std::move(work),
            async_net::bind_cancellation_slot(signal->slot(), async_net::use_awaitable));
      } catch (const boost::system::system_error& e) {
        if (e.code() != async_net::error::operation_aborted) error = std::current_exception();
      } catch (...) {
        error = std::current_exception();
      }
      timer.cancel();
      if (error) std::rethrow_exception(error);
      co_return answer;
    }
  }
  co_return std::nullopt;
}

// `work` raced against `trigger`, an awaitable that completes when the test wants the cut (a
// gate its body opens), cancelled `way`; true when the trigger won and `work` was cancelled.
inline async_net::awaitable<bool> cut_when(async_net::awaitable<void> work,
                                           async_net::awaitable<void> trigger, CancelWay way) {
  namespace experimental = async_net::experimental;
  const auto executor = co_await async_net::this_coro::executor;
  switch (way) {
    case CancelWay::either_operator: {
      using namespace experimental::awaitable_operators;
      const auto first = co_await (std::move(work) || std::move(trigger));
      co_return first.index() == 1;
    }
    case CancelWay::parallel_group: {
      auto [order, work_error, trigger_error] =
          co_await experimental::make_parallel_group(
              async_net::co_spawn(executor, std::move(work), async_net::deferred),
              async_net::co_spawn(executor, std::move(trigger), async_net::deferred))
              .async_wait(experimental::wait_for_one(), async_net::use_awaitable);
      if (order[0] == 0 && work_error) std::rethrow_exception(work_error);
      co_return order[0] == 1;
    }
    case CancelWay::signal: {
      // Shared with the trigger's handler, which may run after this frame ends; the trigger is
      // itself cancelled once `work` is over.
      auto cut = std::make_shared<async_net::cancellation_signal>();
      auto stop_trigger = std::make_shared<async_net::cancellation_signal>();
      async_net::co_spawn(executor, std::move(trigger),
                          async_net::bind_cancellation_slot(
                              stop_trigger->slot(), [cut](const std::exception_ptr& e) {
                                if (!e) cut->emit(async_net::cancellation_type::terminal);
                              }));
      bool cancelled = false;
      std::exception_ptr error;
      try {
        co_await async_net::co_spawn(
            executor, std::move(work),
            async_net::bind_cancellation_slot(cut->slot(), async_net::use_awaitable));
      } catch (const boost::system::system_error& e) {
        if (e.code() == async_net::error::operation_aborted) {
          cancelled = true;
        } else {
          error = std::current_exception();
        }
      } catch (...) {
        error = std::current_exception();
      }
      stop_trigger->emit(async_net::cancellation_type::terminal);
      if (error) std::rethrow_exception(error);
      co_return cancelled;
    }
  }
  co_return false;
}

// run_once(key) of a business answering `answer`, raced against `timer`, cancelled `way`; true
// when the timer won.
template <class Store>
async_net::awaitable<bool> cancelled_by_timer(Store& store, idem::Key key, int answer,
                                              async_net::steady_timer& timer, CancelWay way) {
  auto body = [answer]() -> async_net::awaitable<int> {
    co_await async_pause(std::chrono::milliseconds(1));
    co_return answer;
  };
  const auto out =
      co_await raced_against(idem::async::run_once(store, key, "fp", body), timer, way);
  co_return !out.has_value();
}

// Rounds of `requests` run_once calls (biz type CANCEL_<round>), each raced against a timer
// that cancels it, request i the (i % 3)th CancelWay. Two first rounds on other keys open the
// pool's connections and measure how long a round takes here (a sanitizer build is several
// times slower); the timeouts are spread over one and a half times that, so that they fall on
// every step of a request: a pool wait, a claim, the business (1 ms), a commit. A round with
// cancellations can run slower than the calibration (each statement cut costs its connection),
// so the spread doubles for another round until some requests finish too. Each request's key is
// read as soon as its call returned.
template <class Store>
CancelResult cancel_at_random(Store& store, int requests, unsigned seed) {
  async_net::io_context& io = test_loop();
  io.restart();
  std::mt19937 rng(seed);
  auto round = std::chrono::microseconds{0};
  for (const char* biz_type : {"WARM_UP", "CALIBRATE"}) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < requests; ++i) {
      async_net::co_spawn(
          io,
          [&, i, biz_type]() -> async_net::awaitable<void> {
            auto body = [i]() -> async_net::awaitable<int> {
              co_await async_pause(std::chrono::milliseconds(1));
              co_return i;
            };
            co_await idem::async::run_once(store, {biz_type, std::to_string(i)}, "fp", body);
          },
          async_net::detached);
    }
    io.restart();
    io.run();
    round = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                  start);
  }
  CancelResult r;
  auto spread = static_cast<unsigned>(round.count() * 3 / 2) + 1;
  for (; r.rounds < 6 && (r.cancelled <= 20 || r.finished == 0); ++r.rounds, spread *= 2) {
    const std::string biz_type = "CANCEL_" + std::to_string(r.rounds);
    for (int i = 0; i < requests; ++i) {
      const auto timeout = std::chrono::microseconds(rng() % spread);
      async_net::co_spawn(
          io,
          [&, i, timeout, biz_type]() -> async_net::awaitable<void> {
            const idem::Key key{biz_type, std::to_string(i)};
            async_net::steady_timer timer(co_await async_net::this_coro::executor, timeout);
            const bool cancelled =
                co_await cancelled_by_timer(store, key, i, timer, static_cast<CancelWay>(i % 3));
            ++(cancelled ? r.cancelled : r.finished);
            const auto stored = co_await store.find(key);
            if (stored && stored->status == idem::Status::processing) ++r.processing_after;
          },
          async_net::detached);
    }
    r.requests += requests;
    io.restart();
    io.run();
  }
  return r;
}

// claim_batch on the coroutine store `batched` answers each request of prepare_batch_states'
// batch (batch_states.hpp) exactly as one claim after another answers on `single`, a blocking
// store of the same backend with the same stored states; `setup` is a blocking store on
// `batched`'s table.
template <class AsyncStore, class BlockingStore>
void check_batch_answers(AsyncStore& batched, BlockingStore& setup, BlockingStore& single) {
  const auto batch = prepare_batch_states(setup);
  const auto same = prepare_batch_states(single);
  const auto got = run_on(test_loop(), idem::async::claim_batch(batched, batch));
  check_batch_results(got, batch, claimed_one_by_one(single, same));
}

struct BatchStormResult {
  int deliveries = 0;         // batches delivered, redeliveries included
  int redelivered = 0;        // messages answered retry_later (their key held by another batch)
  int failed_deliveries = 0;  // consume_batch calls that threw a StoreError (redelivered whole)
  std::string first_failure;
  std::vector<std::string> errors;  // what must not happen
  std::string first_error() const { return errors.empty() ? std::string() : errors.front(); }
};

// The key of the storm's key k in batch_storm.
inline idem::Key batch_storm_key(int k) {
  return {"BATCH", "B-" + std::to_string(k)};
}

// The storm's requests as a broker's batches of `batch_size` messages (biz type BATCH), all at
// once on one loop thread, each through consume_batch (so one claim_batch per delivery), whose
// business counts itself in `executions` and takes 1-3 ms. The messages a delivery answers
// retry_later come again, as a batch of their own, and a delivery that fails with a StoreError
// comes again whole (as a broker redelivers what was not acknowledged), until every message is
// committed.
template <class Store>
BatchStormResult batch_storm(Store& store, const Storm& storm, std::size_t batch_size,
                             Executions& executions) {
  async_net::io_context& io = test_loop();
  io.restart();
  BatchStormResult result;
  for (std::size_t first = 0; first < storm.order.size(); first += batch_size) {
    const auto begin = storm.order.begin() + static_cast<std::ptrdiff_t>(first);
    const auto end = storm.order.begin() +
                     static_cast<std::ptrdiff_t>(std::min(storm.order.size(), first + batch_size));
    async_net::co_spawn(
        io,
        [&, pending = std::vector<int>(begin, end)]() mutable -> async_net::awaitable<void> {
          // A claim whose release failed (its connection killed) waits out its lease, and a
          // slow batch gives back what it reaches late: give up only when no message of the
          // batch was settled for well over a lease (the storm runs with default options).
          const auto patience = 4 * idem::Options{}.lease;
          auto give_up = std::chrono::steady_clock::now() + patience;
          std::size_t left = pending.size();
          while (!pending.empty()) {
            if (pending.size() < left) {
              left = pending.size();
              give_up = std::chrono::steady_clock::now() + patience;
            }
            if (std::chrono::steady_clock::now() > give_up) {
              result.errors.push_back("no message of a batch was settled for four leases");
              co_return;
            }
            ++result.deliveries;
            std::vector<idem::ClaimRequest> batch;
            for (int k : pending)
              batch.push_back({batch_storm_key(k), "fp"});
            auto apply = [&](std::size_t i) -> async_net::awaitable<void> {
              executions.executed(batch[i].key.id());
              co_await async_pause(std::chrono::milliseconds(1 + pending[i] % 3));
            };
            std::vector<int> again;
            try {
              const auto acks = co_await idem::async::consume_batch(store, batch, apply);
              for (std::size_t i = 0; i < acks.size(); ++i) {
                if (acks[i].action == idem::Ack::retry_later) {
                  again.push_back(pending[i]);
                } else if (acks[i].action != idem::Ack::commit) {
                  result.errors.push_back("message " + batch[i].key.id() + ": " + acks[i].reason);
                }
              }
              result.redelivered += static_cast<int>(again.size());
            } catch (const idem::StoreError& e) {
              if (result.failed_deliveries++ == 0) result.first_failure = e.what();
              again = pending;
            } catch (const std::exception& e) {
              result.errors.push_back(e.what());
            }
            pending = std::move(again);
            if (!pending.empty()) co_await async_pause(std::chrono::milliseconds(5));
          }
        },
        async_net::detached);
  }
  io.run();
  return result;
}

// What a batch storm on a healthy server shows (`store` names it in the output): no error and
// no failed delivery, every key run once and recorded succeeded (`succeeded`: the table's count
// of succeeded records).
inline void check_batch_storm(const char* store, const BatchStormResult& r, const Storm& storm,
                              Executions& executions, long long succeeded) {
  std::printf("%s batch storm: %d deliveries, %d messages redelivered\n", store, r.deliveries,
              r.redelivered);
  INFO(r.first_error());
  CHECK(r.errors.empty());
  CHECK(r.failed_deliveries == 0);
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
  CHECK(succeeded == storm.distinct);
}

// What a batch storm shows while `kills` connections were killed under it (more than
// `min_kills`, so that the kills mattered): no error (a delivery that failed was redelivered
// whole), every key run once and recorded succeeded (`succeeded`: the store's count).
inline void check_batch_storm_killed(const char* store, const BatchStormResult& r,
                                     const Storm& storm, Executions& executions, long kills,
                                     long min_kills, long long succeeded) {
  std::printf("%s batch kill: %ld kills, %d deliveries, %d failed (redelivered whole)%s%s\n", store,
              kills, r.deliveries, r.failed_deliveries, r.failed_deliveries > 0 ? ", first: " : "",
              r.first_failure.c_str());
  INFO(r.first_error());
  CHECK(r.errors.empty());
  CHECK(kills > min_kills);
  CHECK(executions.max_per_key() == 1);
  CHECK(executions.total() == storm.distinct);
  CHECK(succeeded == storm.distinct);
}

struct BatchCancelResult {
  int batches = 0;
  int cancelled = 0;
  int finished = 0;
  int processing_after = 0;  // keys of a cancelled batch found processing right after it
};

// Rounds of `batches` claim_batch calls at once, each of `batch_size` keys of its own (biz type
// CBATCH_<round>; more than a statement's rows, so a batch takes several) and a repeat, each
// raced against a timer, batch b cancelled the (b % 3)th CancelWay. Two first rounds open the
// pool's connections and measure how long their claims take here; the timeouts spread over
// that (doubled after a round where no batch finished), so that they fall on a pool
// wait, a statement of either chunk, the repeat's single claim, and after the last. Rounds go
// on until more than two rounds' worth were cancelled and some finished. A finished batch
// completes its claims. Each batch's keys are read as soon as its call returned.
template <class Store>
BatchCancelResult cancel_batches_at_random(Store& store, int batches, int batch_size,
                                           unsigned seed) {
  async_net::io_context& io = test_loop();
  std::mt19937 rng(seed);
  BatchCancelResult r;
  const auto requests_of = [&](const std::string& biz_type, int b) {
    std::vector<idem::ClaimRequest> batch;
    for (int i = 0; i < batch_size; ++i)
      batch.push_back({{biz_type, std::to_string(b) + "-" + std::to_string(i)}, "fp"});
    batch.push_back(batch.front());  // a repeat, claimed on its own after the chunks
    return batch;
  };
  // How long the claims of a round take (the completes after them are not what is cut).
  std::chrono::steady_clock::duration claiming{};
  for (const char* biz_type : {"CBATCH_WARM", "CBATCH_CALIBRATE"}) {
    const auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < batches; ++b) {
      async_net::co_spawn(
          io,
          [&, b, biz_type, start]() -> async_net::awaitable<void> {
            const auto batch = requests_of(biz_type, b);
            const auto claims = co_await idem::async::claim_batch(store, batch);
            claiming = std::max(claiming, std::chrono::steady_clock::now() - start);
            for (const auto& c : claims) {
              if (c.verdict == idem::Verdict::acquired)
                co_await store.complete(c.record.key, c.record.ticket, "true");
            }
          },
          async_net::detached);
    }
    io.restart();
    io.run();
  }
  auto spread = static_cast<unsigned>(
                    std::chrono::duration_cast<std::chrono::microseconds>(claiming).count()) +
                1;
  for (int round = 0; round < 16 && (r.cancelled <= 2 * batches || r.finished == 0); ++round) {
    const std::string biz_type = "CBATCH_" + std::to_string(round);
    const int finished_before = r.finished;
    const int cancelled_before = r.cancelled;
    for (int b = 0; b < batches; ++b) {
      const auto timeout = std::chrono::microseconds(rng() % spread);
      async_net::co_spawn(
          io,
          [&, b, timeout, biz_type]() -> async_net::awaitable<void> {
            const auto batch = requests_of(biz_type, b);
            async_net::steady_timer timer(co_await async_net::this_coro::executor, timeout);
            const auto claims = co_await raced_against(idem::async::claim_batch(store, batch),
                                                       timer, static_cast<CancelWay>(b % 3));
            if (claims) {
              ++r.finished;
              for (const idem::ClaimResult& c : *claims) {
                if (c.verdict == idem::Verdict::acquired)
                  co_await store.complete(c.record.key, c.record.ticket, "true");
              }
              co_return;
            }
            ++r.cancelled;
            for (const idem::ClaimRequest& request : batch) {
              const auto stored = co_await store.find(request.key);
              if (stored && stored->status == idem::Status::processing) ++r.processing_after;
            }
          },
          async_net::detached);
    }
    r.batches += batches;
    io.restart();
    io.run();
    // The spread follows the batches' pace: cut statements can make a round slower, and a round
    // whose timers all came after its batches finished (a slow start measured) cut too few.
    if (r.finished == finished_before) {
      spread *= 2;
    } else if (r.cancelled - cancelled_before < batches / 2 && spread > 1) {
      spread /= 2;
    }
  }
  return r;
}

// Asks every key of cancel_at_random's rounds again; answers how many ran or replayed at once
// (none left blocked by a cancelled claim).
template <class Store>
int replayed_or_ran(Store& store, const CancelResult& cancelled, int requests) {
  async_net::io_context& io = test_loop();
  io.restart();
  int n = 0;
  for (int round = 0; round < cancelled.rounds; ++round) {
    for (int i = 0; i < requests; ++i) {
      auto body = [i]() -> async_net::awaitable<int> { co_return i; };
      const auto out = run_on(
          io, idem::async::run_once(store, {"CANCEL_" + std::to_string(round), std::to_string(i)},
                                    "fp", body));
      if (out && out.value() == i) ++n;
    }
  }
  return n;
}

// What batches cancelled at random leave (cancel_batches_at_random's `r`, of `batches` a
// round): enough cut and some finished, and no key processing, right after each cut
// (`processing_now`: the table's count of processing records now). `cut_off` and
// `made_before` (the table's counts of idem.cancelled and idem.abandoned snapshots) only go to
// the output.
inline void check_cancelled_batches(const char* store, const BatchCancelResult& r, int batches,
                                    long long processing_now, long long cut_off,
                                    long long made_before) {
  std::printf(
      "%s batch cancel: %d of %d batches cancelled; retryable failures recorded: %lld for "
      "statements cut off, %lld for claims made before\n",
      store, r.cancelled, r.batches, cut_off, made_before);
  CHECK(r.cancelled > 2 * batches);
  CHECK(r.finished > 0);
  CHECK(r.processing_after == 0);
  CHECK(processing_now == 0);
}

// What the keys of cancel_batches_at_random's rounds (`r`, of `batches` batches of
// `batch_size` keys a round) hold now, read through `store` itself: for a store without a table
// to count in. The three counts are check_cancelled_batches' last three arguments.
struct BatchKeysLeft {
  long long processing = 0;
  long long cut_off = 0;      // retryable failures recorded for a claim cut off (idem.cancelled)
  long long made_before = 0;  // ... for a claim made before the cut (idem.abandoned)
};

template <class Store>
BatchKeysLeft batch_keys_left(Store& store, const BatchCancelResult& r, int batches,
                              int batch_size) {
  BatchKeysLeft left;
  const int rounds = r.batches / batches;
  run_on(test_loop(), [&]() -> async_net::awaitable<int> {
    for (int round = 0; round < rounds; ++round) {
      const std::string biz_type = "CBATCH_" + std::to_string(round);
      for (int b = 0; b < batches; ++b) {
        for (int i = 0; i < batch_size; ++i) {
          const idem::Key key{biz_type, std::to_string(b) + "-" + std::to_string(i)};
          const auto stored = co_await store.find(key);
          if (!stored) continue;
          if (stored->status == idem::Status::processing) ++left.processing;
          if (stored->snapshot.find("idem.cancelled") != std::string::npos) ++left.cut_off;
          if (stored->snapshot.find("idem.abandoned") != std::string::npos) ++left.made_before;
        }
      }
    }
    co_return 0;
  }());
  return left;
}

// A round of the coroutine Janitor on `store`, over claims made with `blocking` (a blocking
// store on the same records): 10 expired claims (purged), PAY/paid and PAY/free stale (a
// resolver answers happened and not happened), MAIL/m1 stale without a resolver (released by a
// fenced repair), PAY/live held. Checks the round's counts and the records after it.
template <class Store, class Blocking>
void check_janitor_round(Store& store, Blocking& blocking) {
  using namespace std::chrono_literals;
  const idem::Options expires{.lease = 100ms, .ttl = 100ms};
  const idem::Options dies{.lease = 100ms, .ttl = 1h};
  for (int i = 0; i < 10; ++i)
    blocking.claim({"OLD", "k" + std::to_string(i)}, "", expires);
  for (const char* id : {"paid", "free"})
    blocking.claim({"PAY", id}, "", dies);
  blocking.claim({"MAIL", "m1"}, "", dies);
  blocking.claim({"PAY", "live"}, "", {.lease = 1h, .ttl = 2h});
  std::this_thread::sleep_for(300ms);

  idem::Resolvers resolvers;
  resolvers.add("PAY", [](const idem::Record& r, const idem::ResolveContext&) {
    if (r.key.id() == "paid") return idem::Resolution::happened(nlohmann::json{{"charge", "c1"}});
    return idem::Resolution::not_happened();
  });
  idem::async::Janitor janitor(store, {.interval = 1h, .resolvers = &resolvers});
  async_net::io_context& io = test_loop();
  run_on(io, [](auto& j) -> async_net::awaitable<bool> {
    co_await j.run_once();
    co_return true;
  }(janitor));
  const idem::JanitorStats s = janitor.stats();
  CHECK(s.rounds == 1);
  CHECK(s.errors == 0);
  CHECK(s.purged == 10);
  CHECK(s.resolved_happened == 1);
  CHECK(s.resolved_not_happened == 1);
  CHECK(s.released == 1);
  CHECK_FALSE(blocking.find({"OLD", "k0"}));
  CHECK(blocking.find({"PAY", "paid"})->status == idem::Status::succeeded);
  CHECK(blocking.find({"PAY", "free"})->status == idem::Status::failed);
  CHECK(blocking.find({"MAIL", "m1"})->status == idem::Status::failed);
  CHECK(blocking.find({"PAY", "live"})->status == idem::Status::processing);
}

}  // namespace idem_test
