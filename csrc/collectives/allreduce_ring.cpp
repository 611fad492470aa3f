// Ring all-reduce for large messages: a ring reduce-scatter followed by a
// ring all-gather. The buffer is cut into n blocks; in the reduce-scatter
// each block travels once around the ring accumulating every rank's part,
// ending fully reduced on one rank; the all-gather then passes each reduced
// block to everyone. Each rank sends 2(n-1)/n of the buffer, the minimum.
// Every block is reduced along one path, so all ranks end bit-identical.
//
// The reduce-scatter moves each block in chunks, double-buffered: chunk
// k+1 is posted (received into the second half of a 2-chunk scratch area,
// sent from the block) before chunk k is reduced, so it is on its way while
// this rank reduces chunk k, and each chunk is reduced right after it
// arrived, while still in cache. The all-gather moves whole blocks, straight
// into place. Messages come from the left neighbour in order; each phase has
// its own slot.
//
// Where the receiver does the copy (UCX's CMA rendezvous on one host), the
// fetch of chunk k+1 and the reduction of chunk k share a core; the overlap
// then only removes waiting, not work (see docs/ARCHITECTURE.md, data path).

#include <algorithm>
#include <vector>

#include "collectives/collective.hpp"
#include "common/error.hpp"

namespace ucxcoll {
namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr uint32_t kReduceScatterSlot = 0;
constexpr uint32_t kAllgatherSlot = 1;
constexpr uint32_t kSizeSlot = 2;

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

  // Ranks that disagree about the size cut different blocks, and a rank
  // whose messages all happen to fit could finish with data that does not
  // add up. So neighbours first compare sizes: a rank next to one that
  // disagrees raises at once, and the ring cannot complete without it.
  const uint64_t mine = count * element;
  uint64_t fromLeft = 0;
  uint64_t fromRight = 0;
  c.recv(left, kSizeSlot, &fromLeft, sizeof(fromLeft));
  c.recv(right, kSizeSlot, &fromRight, sizeof(fromRight));
  c.send(left, kSizeSlot, &mine, sizeof(mine));
  c.send(right, kSizeSlot, &mine, sizeof(mine));
  co_await c.all();
  for (auto [peer, theirs] : {std::pair{left, fromLeft}, std::pair{right, fromRight}}) {
    if (theirs != mine) {
      throw MismatchError(c.name() + ": rank " + std::to_string(peer) + " reduces " + std::to_string(theirs) +
                          " bytes where this rank reduces " + std::to_string(mine) +
                          " (ranks disagree about the tensor sizes)");
    }
  }

  const Blocks blocks(count, n, std::max<std::size_t>(1, kChunkBytes / element));
  auto* base = static_cast<std::byte*>(buffer);
  auto chunkData = [&](int block, std::size_t chunk) { return base + blocks.chunkStart(block, chunk) * element; };
  auto chunkBytes = [&](int block, std::size_t chunk) { return blocks.chunkElements(block, chunk) * element; };
  const std::size_t landingBytes = blocks.chunkElements(0, 0) * element;
  std::byte* landing = c.scratch(2 * landingBytes);

  // Reduce-scatter: in step s a rank passes on block me-s (its own data in
  // step 0, then what it reduced the step before) and receives block
  // me-s-1, which it adds to its own part. Chunk k+1 is posted before
  // chunk k is reduced, so the neighbour fetches it meanwhile.
  for (int step = 0; step < n - 1; ++step) {
    const int sendBlock = (me - step + n) % n;
    const int recvBlock = (me - step - 1 + n) % n;
    const std::size_t rounds = std::max(blocks.chunks(sendBlock), blocks.chunks(recvBlock));
    Request* arriving[2] = {nullptr, nullptr};
    auto post = [&](std::size_t k) {
      if (k < blocks.chunks(recvBlock)) {
        arriving[k % 2] = &c.recv(left, kReduceScatterSlot, landing + (k % 2) * landingBytes, chunkBytes(recvBlock, k));
      }
      if (k < blocks.chunks(sendBlock)) {
        c.send(right, kReduceScatterSlot, chunkData(sendBlock, k), chunkBytes(sendBlock, k));
      }
    };
    post(0);
    for (std::size_t k = 0; k < rounds; ++k) {
      if (k + 1 < rounds) {
        post(k + 1);
      }
      if (k < blocks.chunks(recvBlock)) {
        co_await *arriving[k % 2];
        reduceInto(reduction, type, chunkData(recvBlock, k), landing + (k % 2) * landingBytes,
                   blocks.chunkElements(recvBlock, k));
      }
    }
    co_await c.all();
  }

  // All-gather: rank me now owns the reduced block me+1; in step t it
  // passes on block me+1-t and receives block me-t, straight into place.
  for (int step = 0; step < n - 1; ++step) {
    const int sendBlock = (me + 1 - step + n) % n;
    const int recvBlock = (me - step + n) % n;
    c.recv(left, kAllgatherSlot, chunkData(recvBlock, 0), blocks.elements(recvBlock) * element);
    c.send(right, kAllgatherSlot, chunkData(sendBlock, 0), blocks.elements(sendBlock) * element);
    co_await c.all();
  }
}

}  // namespace ucxcoll
