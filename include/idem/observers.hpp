#pragma once
// Several observers behind the one Options::observer: each event goes to every observer, in
// the order given. The set is fixed when it is made, so that a call takes no lock; like any
// observer, it and the observers it forwards to must outlive the calls.
//
//   idem::Metrics metrics;
//   MyLogger log;
//   idem::Observers both{&metrics, &log};
//   idem::Options options{.observer = &both};

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "idem/errors.hpp"
#include "idem/observer.hpp"

namespace idem {

class Observers final : public Observer {
 public:
  // Throws InvalidArgument for a null observer or for the set itself among them.
  Observers(std::initializer_list<Observer*> observers) : observers_(observers) {
    if (std::any_of(observers_.begin(), observers_.end(),
                    [this](const Observer* o) { return o == nullptr || o == this; })) {
      throw InvalidArgument("idem::Observers: every observer must be non-null and not the set");
    }
  }

  void on_event(const Event& event) noexcept override {
    for (Observer* o : observers_)
      o->on_event(event);
  }

  std::size_t size() const noexcept { return observers_.size(); }

 private:
  std::vector<Observer*> observers_;
};

}  // namespace idem
