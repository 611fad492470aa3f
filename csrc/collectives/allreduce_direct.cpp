// All-reduce by direct exchange, for small messages: every rank sends its
// whole buffer to every other rank (one round), then each rank reduces all
// contributions itself. Every rank adds them in the same order, rank 0
// first, so floating-point results are identical on all ranks. Each
// message's slot is its sender's rank.

#include "collectives/collective.hpp"

namespace ucxcoll {

Task allreduceDirect(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  c.begin(tag::Routine::AllreduceDirect, reduction);
  const int n = c.size();
  const int me = c.rank();
  const std::size_t bytes = count * elementSize(type);
  std::byte* contributions = c.scratch(bytes * static_cast<std::size_t>(n));
  auto slot = [&](int r) { return contributions + bytes * static_cast<std::size_t>(r); };

  for (int offset = 1; offset < n; ++offset) {
    int from = (me - offset + n) % n;
    int to = (me + offset) % n;
    c.recv(from, static_cast<uint32_t>(from), slot(from), bytes);
    c.send(to, static_cast<uint32_t>(me), buffer, bytes);
  }
  co_await c.all();

  copyBytes(slot(me), buffer, bytes);
  copyBytes(buffer, slot(0), bytes);
  for (int r = 1; r < n; ++r) {
    reduceInto(reduction, type, buffer, slot(r), count);
  }
}

}  // namespace ucxcoll
