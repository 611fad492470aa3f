// Scatter from one root: the root sends input p straight to rank p. One
// round. The root receives nothing, so its sends are synchronous (see
// broadcast_binomial.cpp for why).

#include "collectives/collective.hpp"

namespace ucxcoll {

Task scatterDirect(Collective& c, std::span<const void* const> inputs, void* output, std::size_t bytes, int root) {
  c.begin(tag::Routine::ScatterDirect, static_cast<uint32_t>(root));
  const int n = c.size();
  const int me = c.rank();
  if (me != root) {
    co_await c.recv(root, 0, output, bytes);
    co_return;
  }
  for (int offset = 1; offset < n; ++offset) {
    const int to = (me + offset) % n;
    c.sendSync(to, 0, inputs[to], bytes);
  }
  copyBytes(output, inputs[me], bytes);
  co_await c.all();
}

}  // namespace ucxcoll
