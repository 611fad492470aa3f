// Pairwise reduce-scatter: rank p ends with the reduction of every rank's
// block p. Each rank sends its block p straight to rank p and reduces the
// n-1 blocks it receives into its output. That moves (n-1)/n of the input
// per rank, the same volume as a ring, in one round, and every block is
// reduced in rank order (rank 0's first), so the result does not depend on
// the order in which messages arrive. Sends are staggered (rank me sends to
// me+1 first) so that no rank is everyone's first destination.
//
// reduceBlocksPairwise is the exchange alone, with blocks of any size; the
// reduce (reduce_direct.cpp) runs it as its first phase.

#include <vector>

#include "collectives/collective.hpp"

namespace ucxcoll {

Task reduceBlocksPairwise(Collective& c, uint32_t slot, std::span<const void* const> blocks,
                          std::span<const std::size_t> counts, void* output, DataType type, Reduction reduction) {
  const int n = c.size();
  const int me = c.rank();
  const std::size_t element = elementSize(type);
  const std::size_t bytes = counts[me] * element;
  // Rank 0's block lands in the output itself (it is the first operand);
  // the others land in scratch, one area per peer.
  std::byte* landing = c.scratch(bytes * static_cast<std::size_t>(n));
  auto landingOf = [&](int peer) {
    return peer == 0 ? static_cast<std::byte*>(output) : landing + bytes * static_cast<std::size_t>(peer);
  };

  std::vector<Request*> arriving(static_cast<std::size_t>(n), nullptr);
  for (int offset = 1; offset < n; ++offset) {
    const int from = (me - offset + n) % n;
    const int to = (me + offset) % n;
    arriving[from] = &c.recv(from, slot, landingOf(from), bytes);
    c.send(to, slot, blocks[to], counts[to] * element);
  }
  for (int r = 0; r < n; ++r) {
    if (r == me) {
      if (r == 0) {
        copyBytes(output, blocks[me], bytes);
      } else {
        reduceInto(reduction, type, output, blocks[me], counts[me]);
      }
      continue;
    }
    co_await *arriving[r];
    if (r != 0) {
      reduceInto(reduction, type, output, landingOf(r), counts[me]);
    }
  }
  co_await c.all();
}

Task reduceScatterPairwise(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                           DataType type, Reduction reduction) {
  c.begin(tag::Routine::ReduceScatterPairwise, reduction);
  const std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()), count);
  co_await reduceBlocksPairwise(c, 0, inputs, counts, output, type, reduction);
}

}  // namespace ucxcoll
