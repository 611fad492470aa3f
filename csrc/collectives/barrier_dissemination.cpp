// Dissemination barrier: in round k each rank signals rank + 2^k and waits
// for rank - 2^k. After ceil(log2 n) rounds every rank has (transitively)
// heard from every other, so none can leave before all have entered.

#include "collectives/collective.hpp"

namespace ucxcoll {

void barrierDissemination(Collective& c) {
  const int n = c.size();
  const int me = c.rank();
  static const std::byte token{0};
  std::byte received{0};
  uint32_t round = 0;
  for (int distance = 1; distance < n; distance <<= 1, ++round) {
    c.recv((me - distance + n) % n, round, &received, 0);
    c.send((me + distance) % n, round, &token, 0);
    c.wait();
  }
}

}  // namespace ucxcoll
