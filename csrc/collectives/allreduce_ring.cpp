// Ring all-reduce for large messages: a ring reduce-scatter followed by a
// ring all-gather. The buffer is cut into n blocks; in the reduce-scatter
// each block travels once around the ring accumulating every rank's part,
// ending fully reduced on one rank; the all-gather then copies each reduced
// block to everyone. Each rank sends 2(n-1)/n of the buffer, the minimum.
// Every block is reduced on exactly one rank, so all ranks end bit-identical.
//
// The reduce-scatter moves each block in chunks of kChunkBytes and reduces a
// chunk as soon as it has arrived, while it is still in cache, instead of
// reading a whole received block back from memory.

#include <algorithm>

#include "collectives/collective.hpp"

namespace ucxcoll {
namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

// Tag steps: reduce-scatter chunks below 0x8000, all-gather steps above.
// Only one chunk per direction is in flight, so the wrap-around of step
// and chunk numbers can never make two outstanding messages collide.
uint32_t reduceScatterTag(int step, std::size_t chunk) {
  return ((static_cast<uint32_t>(step) & 0x1f) << 10) | (static_cast<uint32_t>(chunk) & 0x3ff);
}
uint32_t allgatherTag(int step) {
  return 0x8000 | (static_cast<uint32_t>(step) & 0x7fff);
}

}  // namespace

void allreduceRing(Collective& c, void* buffer, std::size_t count, DataType type, ReduceOp op) {
  const int n = c.size();
  const int me = c.rank();
  const std::size_t element = elementSize(type);
  auto* base = static_cast<std::byte*>(buffer);

  // Block b covers elements [blockStart(b), blockStart(b+1)).
  auto blockStart = [&](int b) {
    std::size_t ub = static_cast<std::size_t>(b);
    std::size_t quotient = count / static_cast<std::size_t>(n);
    std::size_t remainder = count % static_cast<std::size_t>(n);
    return ub * quotient + std::min(ub, remainder);
  };
  auto blockCount = [&](int b) { return blockStart(b + 1) - blockStart(b); };
  auto blockData = [&](int b) { return base + blockStart(b) * element; };

  const int right = (me + 1) % n;
  const int left = (me - 1 + n) % n;
  const std::size_t chunkCount = std::max<std::size_t>(1, kChunkBytes / element);
  std::byte* incoming = c.scratch(std::min(blockCount(0), chunkCount) * element);
  auto chunks = [&](int b) { return (blockCount(b) + chunkCount - 1) / chunkCount; };
  auto chunkElements = [&](int b, std::size_t i) { return std::min(chunkCount, blockCount(b) - i * chunkCount); };

  // Reduce-scatter: after step s, block (me - s - 1) holds s + 2 ranks' parts.
  for (int step = 0; step < n - 1; ++step) {
    int sendBlock = (me - step + n) % n;
    int recvBlock = (me - step - 1 + n) % n;
    const std::size_t rounds = std::max(chunks(sendBlock), chunks(recvBlock));
    for (std::size_t i = 0; i < rounds; ++i) {
      const uint32_t tag = reduceScatterTag(step, i);
      if (i < chunks(recvBlock)) {
        c.recv(left, tag, incoming, chunkElements(recvBlock, i) * element);
      }
      if (i < chunks(sendBlock)) {
        c.send(right, tag, blockData(sendBlock) + i * chunkCount * element, chunkElements(sendBlock, i) * element);
      }
      c.wait();
      if (i < chunks(recvBlock)) {
        reduceInto(op, type, blockData(recvBlock) + i * chunkCount * element, incoming, chunkElements(recvBlock, i));
      }
    }
  }

  // All-gather: rank me now owns the reduced block (me + 1); pass blocks on.
  for (int step = 0; step < n - 1; ++step) {
    int sendBlock = (me + 1 - step + n) % n;
    int recvBlock = (me - step + n) % n;
    const uint32_t tag = allgatherTag(step);
    c.recv(left, tag, blockData(recvBlock), blockCount(recvBlock) * element);
    c.send(right, tag, blockData(sendBlock), blockCount(sendBlock) * element);
    c.wait();
  }
}

}  // namespace ucxcoll
