// Ring all-reduce for large messages: a ring reduce-scatter followed by a
// ring all-gather. The buffer is cut into n blocks; in the reduce-scatter
// each block travels once around the ring accumulating every rank's part,
// ending fully reduced on one rank; the all-gather then passes each reduced
// block to everyone. Each rank sends 2(n-1)/n of the buffer, the minimum.
// Every block is reduced along one path, so all ranks end bit-identical.
//
// Blocks travel in chunks, and nothing waits for a whole block: a chunk is
// reduced as soon as it has arrived (while still in cache) and sent on at
// once, so the neighbour fetches chunk k while this rank reduces chunk k+1;
// the last step's reduced chunks enter the all-gather immediately. Up to
// kWindow chunks are received ahead into scratch. Messages come from the
// left neighbour in order, one slot per phase.
//
// On a 2-core machine with CMA (the receiver copies), transfer and
// reduction share a core, so the gain is in fewer stalls rather than in
// parallel work; where the sender copies (shared-memory pipelining, RDMA
// put) the neighbour's transfer of chunk k+1 runs while this rank reduces
// chunk k.

#include <algorithm>
#include <vector>

#include "collectives/collective.hpp"
#include "common/error.hpp"

namespace ucxcoll {
namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr std::size_t kWindow = 2;
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

struct Piece {
  int block;
  std::size_t chunk;
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
  auto data = [&](const Piece& p) { return base + blocks.chunkStart(p.block, p.chunk) * element; };
  auto bytes = [&](const Piece& p) { return blocks.chunkElements(p.block, p.chunk) * element; };

  // In reduce-scatter step s a rank receives block me-s-1 (and sends on the
  // block it reduced in step s-1); after n-1 steps it owns block me+1. In
  // all-gather step t it receives block me-t.
  std::vector<Piece> toReduce;
  std::vector<Piece> toGather;
  for (int step = 0; step < n - 1; ++step) {
    for (std::size_t chunk = 0; chunk < blocks.chunks((me - step - 1 + n) % n); ++chunk) {
      toReduce.push_back({(me - step - 1 + n) % n, chunk});
    }
    for (std::size_t chunk = 0; chunk < blocks.chunks((me - step + n) % n); ++chunk) {
      toGather.push_back({(me - step + n) % n, chunk});
    }
  }
  const int ownedBlock = (me + 1) % n;
  const int lastForwardedBlock = (me + 2) % n;  // received in the last all-gather step

  // Reduce-scatter step 0 sends this rank's own block as it is. A block's
  // region receives its final value in the all-gather only once what the
  // reduce-scatter sent from it has been taken.
  std::vector<std::vector<Request*>> sentFrom(static_cast<std::size_t>(n));
  for (std::size_t chunk = 0; chunk < blocks.chunks(me); ++chunk) {
    Piece piece{me, chunk};
    sentFrom[me].push_back(&c.send(right, kReduceScatterSlot, data(piece), bytes(piece)));
  }

  std::byte* landing = c.scratch(kWindow * blocks.chunkElements(0, 0) * element);
  auto landingFor = [&](std::size_t i) { return landing + (i % kWindow) * blocks.chunkElements(0, 0) * element; };
  std::vector<Request*> reduceArrivals(toReduce.size());
  for (std::size_t i = 0; i < std::min(kWindow, toReduce.size()); ++i) {
    reduceArrivals[i] = &c.recv(left, kReduceScatterSlot, landingFor(i), bytes(toReduce[i]));
  }
  std::vector<Request*> gatherArrivals(toGather.size());
  std::size_t gatherPosted = 0;
  auto postGatherReceives = [&] {
    while (gatherPosted < toGather.size()) {
      const Piece& piece = toGather[gatherPosted];
      const auto& sent = sentFrom[piece.block];
      if (piece.chunk >= sent.size() || !sent[piece.chunk]->ended()) {
        break;
      }
      gatherArrivals[gatherPosted++] = &c.recv(left, kAllgatherSlot, data(piece), bytes(piece));
    }
  };

  for (std::size_t i = 0; i < toReduce.size(); ++i) {
    co_await *reduceArrivals[i];
    const Piece& piece = toReduce[i];
    reduceInto(reduction, type, data(piece), landingFor(i), blocks.chunkElements(piece.block, piece.chunk));
    if (i + kWindow < toReduce.size()) {
      reduceArrivals[i + kWindow] =
          &c.recv(left, kReduceScatterSlot, landingFor(i + kWindow), bytes(toReduce[i + kWindow]));
    }
    if (piece.block == ownedBlock) {
      c.send(right, kAllgatherSlot, data(piece), bytes(piece));  // final: all-gather step 0
    } else {
      sentFrom[piece.block].push_back(&c.send(right, kReduceScatterSlot, data(piece), bytes(piece)));
    }
    postGatherReceives();
  }
  while (gatherPosted < toGather.size()) {
    const Piece& piece = toGather[gatherPosted];
    co_await *sentFrom[piece.block][piece.chunk];
    postGatherReceives();
  }

  for (std::size_t i = 0; i < toGather.size(); ++i) {
    co_await *gatherArrivals[i];
    const Piece& piece = toGather[i];
    if (piece.block != lastForwardedBlock) {
      c.send(right, kAllgatherSlot, data(piece), bytes(piece));
    }
  }
  co_await c.all();
}

}  // namespace ucxcoll
