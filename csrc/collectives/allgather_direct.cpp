// All-gather by direct exchange: every rank sends its block to every other
// rank and receives theirs, all in one round. One round of latency makes it
// the choice for small messages; it moves the same bytes as the ring but
// puts all n-1 transfers on the wire at once.

#include "collectives/collective.hpp"

namespace ucxcoll {

void allgatherDirect(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  const int n = c.size();
  const int me = c.rank();
  for (int offset = 1; offset < n; ++offset) {
    // Stagger peers so that not every rank talks to rank 0 first.
    int from = (me - offset + n) % n;
    int to = (me + offset) % n;
    c.recv(from, 0, outputs[from], bytes);
    c.send(to, 0, input, bytes);
  }
  copyBytes(outputs[me], input, bytes);
  c.wait();
}

}  // namespace ucxcoll
