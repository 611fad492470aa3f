// Monitored barrier: every rank reports to rank 0, which waits for all of
// them and then releases them. Unlike the dissemination barrier, rank 0
// hears from each rank directly, so when the deadline passes its error
// names every rank that did not arrive (Operation::describeMissingPeers).

#include "collectives/collective.hpp"

namespace ucxcoll {
namespace {

constexpr uint32_t kArrivedSlot = 0;
constexpr uint32_t kReleasedSlot = 1;

}  // namespace

Task barrierMonitored(Collective& c) {
  c.begin(tag::Routine::BarrierMonitored);
  const int n = c.size();
  if (c.rank() != 0) {
    c.send(0, kArrivedSlot, nullptr, 0);
    co_await c.recv(0, kReleasedSlot, nullptr, 0);
    co_return;
  }
  for (int r = 1; r < n; ++r) {
    c.recv(r, kArrivedSlot, nullptr, 0);
  }
  co_await c.all();
  for (int r = 1; r < n; ++r) {
    c.send(r, kReleasedSlot, nullptr, 0);
  }
  co_await c.all();
}

}  // namespace ucxcoll
