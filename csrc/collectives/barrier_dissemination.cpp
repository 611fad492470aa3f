// Dissemination barrier: in round k each rank signals rank + 2^k and waits
// for rank - 2^k. After ceil(log2 n) rounds every rank has (transitively)
// heard from every other, so none can leave before all have entered. The
// round number is the slot.

#include "collectives/collective.hpp"

namespace ucxcoll {

Task barrierDissemination(Collective& c) {
  c.begin(tag::Routine::BarrierDissemination);
  const int n = c.size();
  const int me = c.rank();
  static const std::byte token{0};
  std::byte received{0};
  uint32_t round = 0;
  for (int distance = 1; distance < n; distance <<= 1, ++round) {
    c.send((me + distance) % n, round, &token, 0);
    co_await c.recv((me - distance + n) % n, round, &received, 0);
  }
  co_await c.all();
}

}  // namespace ucxcoll
