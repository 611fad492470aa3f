// Gather to one root: every other rank sends its input straight into the
// root's output for it. One round; the root receives (n-1) inputs, which
// no algorithm can avoid. Non-roots receive nothing, so their sends are
// synchronous (see broadcast_binomial.cpp for why).

#include "collectives/collective.hpp"

namespace ucxcoll {

Task gatherDirect(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes, int root) {
  c.begin(tag::Routine::GatherDirect, static_cast<uint32_t>(root));
  const int n = c.size();
  const int me = c.rank();
  if (me != root) {
    co_await c.sendSync(root, 0, input, bytes);
    co_return;
  }
  for (int offset = 1; offset < n; ++offset) {
    const int from = (me + offset) % n;
    c.recv(from, 0, outputs[from], bytes);
  }
  copyBytes(outputs[me], input, bytes);
  co_await c.all();
}

}  // namespace ucxcoll
