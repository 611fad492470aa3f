// Ring all-reduce for large messages: a ring reduce-scatter followed by a
// ring all-gather. The buffer is cut into n blocks; in the reduce-scatter
// each block travels once around the ring accumulating every rank's part,
// ending fully reduced on one rank; the all-gather then copies each reduced
// block to everyone. Each rank sends 2(n-1)/n of the buffer, the minimum.
// Every block is reduced on exactly one rank, so all ranks end bit-identical.

#include <algorithm>

#include "collectives/collective.hpp"

namespace ucxcoll {

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
  std::byte* incoming = c.scratch(blockCount(0) * element);

  // Reduce-scatter: after step s, block (me - s - 1) holds s + 2 ranks' parts.
  for (int step = 0; step < n - 1; ++step) {
    int sendBlock = (me - step + n) % n;
    int recvBlock = (me - step - 1 + n) % n;
    c.recv(left, static_cast<uint32_t>(step), incoming, blockCount(recvBlock) * element);
    c.send(right, static_cast<uint32_t>(step), blockData(sendBlock), blockCount(sendBlock) * element);
    c.wait();
    reduceInto(op, type, blockData(recvBlock), incoming, blockCount(recvBlock));
  }

  // All-gather: rank me now owns the reduced block (me + 1); pass blocks on.
  for (int step = 0; step < n - 1; ++step) {
    int sendBlock = (me + 1 - step + n) % n;
    int recvBlock = (me - step + n) % n;
    uint32_t tagStep = static_cast<uint32_t>(n - 1 + step);
    c.recv(left, tagStep, blockData(recvBlock), blockCount(recvBlock) * element);
    c.send(right, tagStep, blockData(sendBlock), blockCount(sendBlock) * element);
    c.wait();
  }
}

}  // namespace ucxcoll
