// Pairwise reduce-scatter: rank p ends with the reduction of every rank's
// block p. Each rank sends its block p straight to rank p and reduces the
// n-1 blocks it receives into its output. That moves (n-1)/n of the input
// per rank, the same volume as a ring, in one round, and every block is
// reduced in rank order (rank 0's first), so the result does not depend on
// the order in which messages arrive. Sends are staggered (rank me sends to
// me+1 first) so that no rank is everyone's first destination.
//
// Two ranks on one host whose links can both be staged through shared
// memory (staged_link.hpp; from UCXCOLL_STAGING_MIN_BYTES) take the staged pair
// instead: chunk by chunk, each rank stages its input's chunk of the
// peer's block and reduces its own block's chunk with the one the peer
// staged, straight into its output. Both cores copy and reduce at once,
// and each byte is reduced while the chunk is in cache, where the pairwise
// form has UCX copy the whole block into scratch first (CMA, in the
// kernel) and reduces it after. With two operands a reduction gives the
// same result in either order. The agreement on staging travels on slots
// of its own, so ranks that fall back to pairwise stay in step.
//
// reduceBlocksPairwise is the exchange alone, with blocks of any size; the
// reduce (reduce_direct.cpp) runs it as its first phase.

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/collective.hpp"
#include "collectives/staged_link.hpp"
#include "collectives/staging.hpp"

namespace ucxcoll {
namespace {

constexpr uint32_t kPairwiseSlot = 0;
constexpr uint32_t kStagedSlot = 1;
constexpr uint32_t kStagedBackSlot = 2;

Task reduceScatterStagedPair(RingLinks& links, const void* mine, const void* theirs, void* output, std::size_t count,
                             DataType type, Reduction reduction) {
  const std::size_t element = elementSize(type);
  const std::size_t chunkBytes = std::max<std::size_t>(1, kStagingSlotBytes / element) * element;
  const std::size_t bytes = count * element;
  const auto* own = static_cast<const std::byte*>(mine);
  const auto* peers = static_cast<const std::byte*>(theirs);
  auto* out = static_cast<std::byte*>(output);
  for (std::size_t at = 0; at < bytes; at += chunkBytes) {
    const std::size_t size = std::min(chunkBytes, bytes - at);
    co_await links.put(kStagedSlot, peers + at, size);
    co_await links.take(kStagedSlot, size, [&](const std::byte* staged) {
      std::memcpy(out + at, own + at, size);
      reduceInto(reduction, type, out + at, staged, size / element);
    });
  }
  co_await links.drain();
}

}  // namespace

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
  const std::size_t bytes = count * elementSize(type);
  const bool stagedPair = c.size() == 2 && worthStaging(bytes);
  // A routine of its own, so that ranks on either side of the size
  // threshold (they disagree about the size) see it at once.
  c.begin(stagedPair ? tag::Routine::ReduceScatterStagedPair : tag::Routine::ReduceScatterPairwise, reduction);
  if (stagedPair) {
    // A rank's two links are the same pair: both ranks see the same
    // verdicts and choose alike.
    RingLinks links(c, kStagedSlot, kStagedBackSlot);
    co_await links.connect(bytes);
    if (links.sendStaged() && links.receiveStaged()) {
      const int peer = 1 - c.rank();
      co_await reduceScatterStagedPair(links, inputs[c.rank()], inputs[peer], output, count, type, reduction);
      co_return;
    }
  }
  const std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()), count);
  co_await reduceBlocksPairwise(c, kPairwiseSlot, inputs, counts, output, type, reduction);
}

Task reduceScatterUneven(Collective& c, std::span<const void* const> inputs, std::span<const std::size_t> counts,
                         void* output, DataType type, Reduction reduction) {
  c.begin(tag::Routine::ReduceScatterPairwise, reduction);
  co_await reduceBlocksPairwise(c, kPairwiseSlot, inputs, counts, output, type, reduction);
}

}  // namespace ucxcoll
