// All-gather by direct exchange: every rank sends its block to every other
// rank and receives theirs, all in one round. One round of latency makes it
// the choice for small messages; it moves the same bytes as the ring but
// puts all n-1 transfers on the wire at once.
//
// A rank may contribute several blocks (the hierarchical all-gather's
// second phase hands on a block from each host): each message's slot is
// its sender's rank times the blocks per rank plus the block's number,
// which tells a receiver's messages apart (one block: the sender's rank).

#include "collectives/collective.hpp"

namespace ucxcoll {

Task allgatherDirectBlocks(Collective& c, std::span<const void* const> inputs, std::span<void* const> outputs,
                           std::size_t bytes) {
  c.begin(tag::Routine::AllgatherDirect);
  const int n = c.size();
  const int me = c.rank();
  const std::size_t blocks = inputs.size();
  auto slot = [&](int rank, std::size_t block) { return static_cast<uint32_t>(rank * blocks + block); };
  for (int offset = 1; offset < n; ++offset) {
    // Stagger peers so that not every rank talks to rank 0 first.
    const int from = (me - offset + n) % n;
    const int to = (me + offset) % n;
    for (std::size_t block = 0; block < blocks; ++block) {
      c.recv(from, slot(from, block), outputs[from * blocks + block], bytes);
      c.send(to, slot(me, block), inputs[block], bytes);
    }
  }
  for (std::size_t block = 0; block < blocks; ++block) {
    copyBytes(outputs[me * blocks + block], inputs[block], bytes);
  }
  co_await c.all();
}

Task allgatherDirect(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  const void* const inputs[] = {input};
  co_await allgatherDirectBlocks(c, inputs, outputs, bytes);
}

}  // namespace ucxcoll
