// Binomial-tree broadcast. Ranks are renumbered so the root is 0; a rank
// receives once, from the rank that differs from it in its lowest set bit,
// then forwards to the ranks below that bit. log2(n) rounds, and no rank
// sends the message more than log2(n) times.

#include "collectives/collective.hpp"

namespace ucxcoll {

void broadcastBinomial(Collective& c, void* buffer, std::size_t bytes, int root) {
  const int n = c.size();
  const int relative = (c.rank() - root + n) % n;
  auto actual = [&](int relativeRank) { return (relativeRank + root) % n; };

  int mask = 1;
  while (mask < n) {
    if ((relative & mask) != 0) {
      c.recv(actual(relative - mask), 0, buffer, bytes);
      c.wait();
      break;
    }
    mask <<= 1;
  }
  // Forward to the subtrees below the bit we received on (the root: all).
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask < n) {
      c.send(actual(relative + mask), 0, buffer, bytes);
    }
  }
  c.wait();
}

}  // namespace ucxcoll
