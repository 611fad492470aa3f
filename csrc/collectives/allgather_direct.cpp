// All-gather by direct exchange: every rank sends its block to every other
// rank and receives theirs, all in one round. One round of latency makes it
// the choice for small messages; it moves the same bytes as the ring but
// puts all n-1 transfers on the wire at once. Each message's slot is its
// sender's rank, which tells a receiver's n-1 messages apart.

#include "collectives/collective.hpp"

namespace ucxcoll {

Task allgatherDirect(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  c.begin(tag::Routine::AllgatherDirect);
  const int n = c.size();
  const int me = c.rank();
  for (int offset = 1; offset < n; ++offset) {
    // Stagger peers so that not every rank talks to rank 0 first.
    int from = (me - offset + n) % n;
    int to = (me + offset) % n;
    c.recv(from, static_cast<uint32_t>(from), outputs[from], bytes);
    c.send(to, static_cast<uint32_t>(me), input, bytes);
  }
  copyBytes(outputs[me], input, bytes);
  co_await c.all();
}

}  // namespace ucxcoll
