// Ring reduce-scatter for large blocks on more than two ranks: the first
// half of the ring all-reduce (allreduce_ring.cpp), with the input left
// alone and rank p's block landing in its output.
//
// Block p starts at rank p+1 and travels right around the ring, n-1 hops,
// each rank on the way adding its own inputs[p]: in step s rank me passes
// on block me-1-s (its input block in step 0, then what it reduced the
// step before) and receives block me-2-s, which it reduces with its own
// input block. In the last step that block is me, reduced straight into
// the output. Each rank sends (n-1)/n of its input, as the pairwise
// exchange does, but it reduces one block per step while the next block
// moves, in chunks: the pairwise exchange has every peer's whole block
// copied into scratch first (UCX's CMA copy, in the kernel) and reduces
// after. Every block is reduced in one order along the ring, so the result
// does not depend on message timing.
//
// Each link is staged through shared memory where both ends can (the
// sender copies a chunk into a slot, the receiver reduces straight out of
// it; staged_link.hpp) or carries plain messages, in chunks whose receives
// are posted one ahead of the reduction. The partial blocks live in two
// scratch areas: the one received into in step s is sent in step s+1,
// while step s+1 receives into the other; a step ends only when its sends
// have, so the area is free again two steps later.

#include <algorithm>
#include <cstring>

#include "collectives/collective.hpp"
#include "collectives/staged_link.hpp"

namespace ucxcoll {
namespace {

constexpr std::size_t kPlainChunkBytes = std::size_t{1} << 20;
constexpr uint32_t kDataSlot = 0;
constexpr uint32_t kHelloSlot = 1;
constexpr uint32_t kBackSlot = 2;

}  // namespace

Task reduceScatterRing(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                       DataType type, Reduction reduction) {
  c.begin(tag::Routine::ReduceScatterRing, reduction);
  const int n = c.size();
  const int me = c.rank();
  const std::size_t element = elementSize(type);
  const std::size_t bytes = count * element;
  if (n == 1) {
    copyBytes(output, inputs[0], bytes);
    co_return;
  }
  const int right = (me + 1) % n;
  const int left = (me - 1 + n) % n;

  RingLinks links(c, kHelloSlot, kBackSlot);
  co_await links.connect(bytes);

  auto elementsPerChunk = [&](std::size_t chunkBytes) { return std::max<std::size_t>(1, chunkBytes / element); };
  const std::size_t sendChunkBytes = elementsPerChunk(links.sendChunkBytes(kPlainChunkBytes)) * element;
  const std::size_t recvChunkBytes = elementsPerChunk(links.receiveChunkBytes(kPlainChunkBytes)) * element;
  auto chunksOf = [&](std::size_t chunkBytes) { return bytes == 0 ? 0 : (bytes + chunkBytes - 1) / chunkBytes; };
  const std::size_t sendChunks = chunksOf(sendChunkBytes);
  const std::size_t recvChunks = chunksOf(recvChunkBytes);

  std::byte* partials = n > 2 ? c.scratch(2 * bytes) : nullptr;
  auto partial = [&](int step) { return partials + static_cast<std::size_t>(step % 2) * bytes; };
  auto* out = static_cast<std::byte*>(output);

  for (int step = 0; step < n - 1; ++step) {
    const int sendBlock = (me - 1 - step + 2 * n) % n;
    const int recvBlock = (me - 2 - step + 2 * n) % n;
    const bool last = step == n - 2;
    const auto* outgoing = step == 0 ? static_cast<const std::byte*>(inputs[sendBlock]) : partial(step - 1);
    std::byte* target = last ? out : partial(step);
    const auto* own = static_cast<const std::byte*>(inputs[recvBlock]);

    Request* arriving[2] = {nullptr, nullptr};
    auto postReceive = [&](std::size_t k) {
      if (!links.receiveStaged() && k < recvChunks) {
        const std::size_t at = k * recvChunkBytes;
        arriving[k % 2] = &c.recv(left, kDataSlot, target + at, std::min(recvChunkBytes, bytes - at));
      }
    };
    postReceive(0);
    for (std::size_t k = 0; k < std::max(sendChunks, recvChunks); ++k) {
      if (k < sendChunks) {
        const std::size_t at = k * sendChunkBytes;
        const std::size_t size = std::min(sendChunkBytes, bytes - at);
        if (links.sendStaged()) {
          co_await links.put(kDataSlot, outgoing + at, size);
        } else {
          c.send(right, kDataSlot, outgoing + at, size);
        }
      }
      if (k < recvChunks) {
        const std::size_t at = k * recvChunkBytes;
        const std::size_t size = std::min(recvChunkBytes, bytes - at);
        if (links.receiveStaged()) {
          co_await links.take(kDataSlot, size, [&](const std::byte* staged) {
            std::memcpy(target + at, own + at, size);
            reduceInto(reduction, type, target + at, staged, size / element);
          });
        } else {
          // The chunk landed in place; the rank's own part joins it there
          // (operands swapped against the staged path: the reductions are
          // commutative, so the value is the same).
          postReceive(k + 1);
          co_await *arriving[k % 2];
          reduceInto(reduction, type, target + at, own + at, size / element);
        }
      }
    }
    co_await c.all();
  }
  co_await links.drain();
}

}  // namespace ucxcoll
