// Ring all-reduce for large messages: a ring reduce-scatter followed by a
// ring all-gather. The buffer is cut into n blocks; in the reduce-scatter
// each block travels once around the ring accumulating every rank's part,
// ending fully reduced on one rank; the all-gather then passes each reduced
// block to everyone. Each rank sends 2(n-1)/n of the buffer, the minimum.
// Every block is reduced along one path, so all ranks end bit-identical.
//
// Each link to a neighbour either carries plain messages or is staged
// through shared memory (staged_link.hpp; ranks on one host). Plain: the
// reduce-scatter moves each block in chunks, double-buffered (chunk k+1 is
// posted, received into the second half of a 2-chunk scratch area, before
// chunk k is reduced), and the all-gather moves whole blocks straight into
// place; UCX's CMA rendezvous then copies each byte once, in the kernel.
// Staged: the sender copies each chunk into a slot and the receiver reduces
// or copies it straight out of there, in user space. With two ranks the
// reduced chunk is passed on at once, while in cache (see "fused" below).
// Messages come from the left neighbour in order; each phase has its own
// slot.

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/collective.hpp"
#include "collectives/staged_link.hpp"

namespace ucxcoll {
namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr uint32_t kReduceScatterSlot = 0;
constexpr uint32_t kAllgatherSlot = 1;
constexpr uint32_t kHelloSlot = 2;
constexpr uint32_t kBackSlot = 3;

// Block b of `count` elements split n ways, and its chunks.
class Blocks {
 public:
  Blocks(std::size_t count, int n, std::size_t chunkElements)
      : count_(count), n_(static_cast<std::size_t>(n)), chunkElements_(chunkElements) {}

  std::size_t start(int block) const {
    auto b = static_cast<std::size_t>(block);
    return b * (count_ / n_) + std::min(b, count_ % n_);
  }
  std::size_t elements(int block) const { return start(block + 1) - start(block); }
  std::size_t chunks(int block) const { return (elements(block) + chunkElements_ - 1) / chunkElements_; }
  std::size_t chunkStart(int block, std::size_t chunk) const { return start(block) + chunk * chunkElements_; }
  std::size_t chunkElements(int block, std::size_t chunk) const {
    return std::min(chunkElements_, elements(block) - chunk * chunkElements_);
  }

 private:
  std::size_t count_;
  std::size_t n_;
  std::size_t chunkElements_;
};

}  // namespace

Task allreduceRing(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  c.begin(tag::Routine::AllreduceRing, reduction);
  const int n = c.size();
  const int me = c.rank();
  if (n == 1) {
    co_return;
  }
  const int right = (me + 1) % n;
  const int left = (me - 1 + n) % n;
  const std::size_t element = elementSize(type);

  RingLinks links(c, kHelloSlot, kBackSlot);
  co_await links.connect(count * element);

  auto* base = static_cast<std::byte*>(buffer);
  const Blocks sendBlocks(count, n, std::max<std::size_t>(1, links.sendChunkBytes(kChunkBytes) / element));
  const Blocks recvBlocks(count, n, std::max<std::size_t>(1, links.receiveChunkBytes(kChunkBytes) / element));
  auto data = [&](const Blocks& blocks, int block, std::size_t chunk) {
    return base + blocks.chunkStart(block, chunk) * element;
  };
  auto bytes = [&](const Blocks& blocks, int block, std::size_t chunk) {
    return blocks.chunkElements(block, chunk) * element;
  };
  const std::size_t landingBytes = recvBlocks.chunkElements(0, 0) * element;
  std::byte* landing = links.receiveStaged() ? nullptr : c.scratch(2 * landingBytes);
  // Two ranks with both links staged (they then agree on it, as the two
  // links are the same pair): the last reduce-scatter step and the
  // all-gather run as one loop. With more ranks a neighbour may stage
  // only one of its links and would expect the chunks in the other order.
  const bool fused = n == 2 && links.sendStaged() && links.receiveStaged();

  // Reduce-scatter: in step s a rank passes on block me-s (its own data in
  // step 0, then what it reduced the step before) and receives block
  // me-s-1, which it adds to its own part. Plain messages: chunk k+1 is
  // posted before chunk k is reduced, so the neighbour fetches it
  // meanwhile. Staged: the chunk is reduced straight out of the left
  // neighbour's staging slot.
  for (int step = 0; step < n - 1; ++step) {
    const int sendBlock = (me - step + n) % n;
    const int recvBlock = (me - step - 1 + n) % n;
    const std::size_t sendChunks = sendBlocks.chunks(sendBlock);
    const std::size_t recvChunks = recvBlocks.chunks(recvBlock);
    Request* arriving[2] = {nullptr, nullptr};
    auto postReceive = [&](std::size_t k) {
      if (!links.receiveStaged() && k < recvChunks) {
        arriving[k % 2] =
            &c.recv(left, kReduceScatterSlot, landing + (k % 2) * landingBytes, bytes(recvBlocks, recvBlock, k));
      }
    };
    postReceive(0);
    // Both links staged: in the last step each chunk, once fully reduced,
    // is passed on while still in cache, and the left neighbour's is taken:
    // the all-gather's first step runs in this loop.
    const bool gatherHere = fused && step == n - 2;
    const std::size_t gatherChunks = gatherHere ? recvBlocks.chunks(me) : 0;
    for (std::size_t k = 0; k < std::max({sendChunks, recvChunks, gatherChunks}); ++k) {
      if (k < sendChunks) {
        if (links.sendStaged()) {
          co_await links.put(kReduceScatterSlot, data(sendBlocks, sendBlock, k), bytes(sendBlocks, sendBlock, k));
        } else {
          c.send(right, kReduceScatterSlot, data(sendBlocks, sendBlock, k), bytes(sendBlocks, sendBlock, k));
        }
      }
      if (k < recvChunks) {
        std::byte* into = data(recvBlocks, recvBlock, k);
        const std::size_t elements = recvBlocks.chunkElements(recvBlock, k);
        if (links.receiveStaged()) {
          co_await links.take(kReduceScatterSlot, elements * element,
                              [&](const std::byte* chunk) { reduceInto(reduction, type, into, chunk, elements); });
          if (gatherHere) {
            co_await links.put(kAllgatherSlot, into, elements * element);
          }
        } else {
          postReceive(k + 1);
          co_await *arriving[k % 2];
          reduceInto(reduction, type, into, landing + (k % 2) * landingBytes, elements);
        }
      }
      if (k < gatherChunks) {
        std::byte* into = data(recvBlocks, me, k);
        const std::size_t size = bytes(recvBlocks, me, k);
        co_await links.take(kAllgatherSlot, size, [&](const std::byte* chunk) { std::memcpy(into, chunk, size); });
      }
    }
    co_await c.all();
  }

  // All-gather: rank me now owns the reduced block me+1; in step t it
  // passes on block me+1-t and receives block me-t. Plain messages carry
  // whole blocks straight into place; staged chunks are copied out of the
  // slots.
  for (int step = fused ? 1 : 0; step < n - 1; ++step) {
    const int sendBlock = (me + 1 - step + n) % n;
    const int recvBlock = (me - step + n) % n;
    if (!links.receiveStaged()) {
      c.recv(left, kAllgatherSlot, data(recvBlocks, recvBlock, 0), recvBlocks.elements(recvBlock) * element);
    }
    if (!links.sendStaged()) {
      c.send(right, kAllgatherSlot, data(sendBlocks, sendBlock, 0), sendBlocks.elements(sendBlock) * element);
    }
    const std::size_t sendChunks = links.sendStaged() ? sendBlocks.chunks(sendBlock) : 0;
    const std::size_t recvChunks = links.receiveStaged() ? recvBlocks.chunks(recvBlock) : 0;
    for (std::size_t k = 0; k < std::max(sendChunks, recvChunks); ++k) {
      if (k < sendChunks) {
        co_await links.put(kAllgatherSlot, data(sendBlocks, sendBlock, k), bytes(sendBlocks, sendBlock, k));
      }
      if (k < recvChunks) {
        std::byte* into = data(recvBlocks, recvBlock, k);
        const std::size_t size = bytes(recvBlocks, recvBlock, k);
        co_await links.take(kAllgatherSlot, size, [&](const std::byte* chunk) { std::memcpy(into, chunk, size); });
      }
    }
    co_await c.all();
  }
  co_await links.drain();
}

}  // namespace ucxcoll
