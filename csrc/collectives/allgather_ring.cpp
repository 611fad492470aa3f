// Ring all-gather: in step s each rank passes the block it received in step
// s-1 to its right neighbour, so after n-1 steps every block has visited
// every rank. Each rank sends and receives (n-1)/n of the result exactly
// once, which is optimal for large messages. Blocks go straight into the
// caller's output buffers: no staging copies.

#include "collectives/collective.hpp"

namespace ucxcoll {

void allgatherRing(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  const int n = c.size();
  const int me = c.rank();
  copyBytes(outputs[me], input, bytes);
  const int right = (me + 1) % n;
  const int left = (me - 1 + n) % n;
  for (int step = 0; step < n - 1; ++step) {
    int sendBlock = (me - step + n) % n;
    int recvBlock = (me - step - 1 + n) % n;
    c.recv(left, static_cast<uint32_t>(step), outputs[recvBlock], bytes);
    c.send(right, static_cast<uint32_t>(step), outputs[sendBlock], bytes);
    c.wait();
  }
}

}  // namespace ucxcoll
