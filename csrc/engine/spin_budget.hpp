#pragma once
// How long a thread that waits for its own operation polls before it sleeps.
//
// A sleep costs a wake-up, and on the VMs this runs on a wake-up takes
// 50-200 us: more than a whole small collective. So a waiting thread polls,
// for as long as the waits it has seen lately usually last: the budget is
// 1.5 x the 75th percentile of the last kWindow waits (a wait: from the
// first pass that found nothing to do until something arrived), between
// `floor` and `ceiling`. When most waits last longer than the ceiling
// (a peer that computes between collectives), polling would only burn the
// core, and the budget falls back to the floor. A fixed budget (the user's
// UCXCOLL_SPIN_US) does not adapt.
//
// Driver only: one thread at a time, handed over under the engine's mutex.

#include <array>
#include <chrono>
#include <cstddef>

namespace ucxcoll {

class SpinBudget {
 public:
  using Duration = std::chrono::nanoseconds;
  static constexpr std::size_t kWindow = 32;

  SpinBudget(Duration floor, Duration ceiling, bool adaptive)
      : floor_(floor), ceiling_(ceiling), adaptive_(adaptive), budget_(floor) {}

  Duration budget() const { return budget_; }
  // A wait that ended because something arrived, after `waited`.
  void noteWait(Duration waited);

 private:
  void recompute();

  Duration floor_;
  Duration ceiling_;
  bool adaptive_;
  Duration budget_;
  std::array<Duration, kWindow> recent_{};
  std::size_t seen_ = 0;
};

}  // namespace ucxcoll
