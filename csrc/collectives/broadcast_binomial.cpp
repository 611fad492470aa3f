// Binomial-tree broadcast. Ranks are renumbered so the root is 0; a rank
// receives once, from the rank that differs from it in its lowest set bit,
// then forwards to the ranks below that bit. log2(n) rounds, and no rank
// sends the message more than log2(n) times.
//
// The root receives nothing, so its sends are synchronous: they complete
// only once a child has matched them. A root whose peers run another
// collective (or believe another rank is the root) then waits, and sees
// their messages, instead of returning as if all went well.

#include "collectives/collective.hpp"

namespace ucxcoll {

Task broadcastBinomial(Collective& c, void* buffer, std::size_t bytes, int root) {
  c.begin(tag::Routine::BroadcastBinomial, static_cast<uint32_t>(root));
  const int n = c.size();
  const int relative = (c.rank() - root + n) % n;
  auto actual = [&](int relativeRank) { return (relativeRank + root) % n; };

  int mask = 1;
  while (mask < n) {
    if ((relative & mask) != 0) {
      co_await c.recv(actual(relative - mask), 0, buffer, bytes);
      break;
    }
    mask <<= 1;
  }
  // Forward to the subtrees below the bit we received on (the root: all).
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask < n) {
      if (relative == 0) {
        c.sendSync(actual(relative + mask), 0, buffer, bytes);
      } else {
        c.send(actual(relative + mask), 0, buffer, bytes);
      }
    }
  }
  co_await c.all();
}

}  // namespace ucxcoll
