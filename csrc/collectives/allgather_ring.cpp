// Ring all-gather: in step s each rank passes the block it received in step
// s-1 to its right neighbour, so after n-1 steps every block has visited
// every rank. Each rank sends and receives (n-1)/n of the result exactly
// once, which is optimal for large messages. Blocks go straight into the
// caller's output buffers, and every receive is posted up front (they come
// from the left neighbour in order, so they can share one slot): a block is
// passed on the moment it has arrived.

#include <vector>

#include "collectives/collective.hpp"

namespace ucxcoll {

Task allgatherRing(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  c.begin(tag::Routine::AllgatherRing);
  const int n = c.size();
  const int me = c.rank();
  copyBytes(outputs[me], input, bytes);
  if (n == 1) {
    co_return;
  }
  const int right = (me + 1) % n;
  const int left = (me - 1 + n) % n;
  auto blockReceivedInStep = [&](int step) { return (me - step - 1 + n) % n; };

  std::vector<Request*> arriving;
  for (int step = 0; step < n - 1; ++step) {
    arriving.push_back(&c.recv(left, 0, outputs[blockReceivedInStep(step)], bytes));
  }
  c.send(right, 0, outputs[me], bytes);
  for (int step = 0; step < n - 2; ++step) {
    co_await *arriving[step];
    c.send(right, 0, outputs[blockReceivedInStep(step)], bytes);
  }
  co_await c.all();
}

}  // namespace ucxcoll
