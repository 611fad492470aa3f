// Reduce between two ranks on one host, staged through shared memory
// (staged_link.hpp): the large-message reduce of a 2-rank group whose links
// are both staged. reduce_direct.cpp connects the links and calls this.
//
// The buffer is cut into two blocks; rank p reduces block p. Chunk by
// chunk, each rank stages its input's chunk of the peer's block, and
// reduces its own block's chunk with the one the peer staged: the root
// straight into its output, the other rank into a chunk of scratch that it
// stages back to the root at once, while it is still in cache. So every
// input byte is read once and every output byte written once, and both
// cores copy and reduce at the same time. (The pairwise path instead has
// UCX copy each block into scratch in the kernel, reduces it from there,
// and sends the reduced block to the root as a second transfer.)
//
// Per chunk k the non-root stages its input's chunk k of the root's block,
// then its reduced chunk k; the root takes them in that order. With two
// operands a reduction is the same in either order, so the root's result
// equals that of the other algorithms.

#include <algorithm>
#include <cstring>

#include "collectives/collective.hpp"
#include "collectives/staged_link.hpp"

namespace ucxcoll {

Task reduceStagedPair(Collective& c, RingLinks& links, uint32_t slot, const void* input, void* output,
                      std::size_t count, DataType type, Reduction reduction, int root) {
  const int me = c.rank();
  const int peer = 1 - me;
  const std::size_t element = elementSize(type);
  const std::size_t chunkElements = std::max<std::size_t>(1, kStagingSlotBytes / element);
  // Block 0 takes the odd element, as everywhere else.
  auto blockStart = [&](int block) { return block == 0 ? 0 : count / 2 + count % 2; };
  auto blockElements = [&](int block) { return block == 0 ? count / 2 + count % 2 : count / 2; };
  auto chunks = [&](int block) { return (blockElements(block) + chunkElements - 1) / chunkElements; };
  // Byte offset and size of chunk k of a block.
  auto offset = [&](int block, std::size_t k) { return (blockStart(block) + k * chunkElements) * element; };
  auto bytes = [&](int block, std::size_t k) {
    return std::min(chunkElements, blockElements(block) - k * chunkElements) * element;
  };

  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  const bool isRoot = me == root;
  std::byte* reduced = isRoot ? nullptr : c.scratch(kStagingSlotBytes);
  const std::size_t mine = chunks(me);
  const std::size_t theirs = chunks(peer);
  for (std::size_t k = 0; k < std::max(mine, theirs); ++k) {
    // The root's output may be its input: chunk k of the peer's block is
    // staged here, before the reduced chunk k overwrites it below.
    if (k < theirs) {
      co_await links.put(slot, in + offset(peer, k), bytes(peer, k));
    }
    if (k < mine) {
      const std::size_t at = offset(me, k);
      const std::size_t size = bytes(me, k);
      std::byte* into = isRoot ? out + at : reduced;
      co_await links.take(slot, size, [&](const std::byte* staged) {
        copyBytes(into, in + at, size);
        reduceInto(reduction, type, into, staged, size / element);
      });
      if (!isRoot) {
        co_await links.put(slot, reduced, size);
      }
    }
    if (isRoot && k < theirs) {
      const std::size_t at = offset(peer, k);
      const std::size_t size = bytes(peer, k);
      co_await links.take(slot, size, [&](const std::byte* staged) { std::memcpy(out + at, staged, size); });
    }
  }
  co_await links.drain();
}

}  // namespace ucxcoll
