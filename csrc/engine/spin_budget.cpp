#include "engine/spin_budget.hpp"

#include <algorithm>

namespace ucxcoll {

void SpinBudget::noteWait(Duration waited) {
  if (!adaptive_) {
    return;
  }
  recent_[seen_ % kWindow] = waited;
  ++seen_;
  // Every eighth wait: a few hundred nanoseconds, next to waits of
  // microseconds at least.
  if (seen_ % 8 == 0) {
    recompute();
  }
}

void SpinBudget::recompute() {
  const std::size_t count = std::min(seen_, kWindow);
  std::array<Duration, kWindow> sorted = recent_;
  auto quartile = sorted.begin() + static_cast<std::ptrdiff_t>(count * 3 / 4);
  std::nth_element(sorted.begin(), quartile, sorted.begin() + static_cast<std::ptrdiff_t>(count));
  budget_ = *quartile > ceiling_ ? floor_ : std::clamp(*quartile * 3 / 2, floor_, ceiling_);
}

}  // namespace ucxcoll
