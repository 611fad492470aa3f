// Staged all-to-all for large equal blocks: n-1 rounds of the pairwise
// exchange, one pair of links at a time. In round k this rank sends its
// block for rank me+k and receives rank me-k's block for it, each link
// staged through the sender's shared memory (staged_link.hpp) where both
// ends can share it, or carrying the whole block as one message where not.
//
// Why not alltoall_pairwise.cpp's every-block-at-once: on one host UCX
// moves a large block with one CMA read, and on buffers of 4 KiB pages
// that read runs at a quarter of memcpy's speed here (page pinning, not
// copying). Through a staging slot each end makes one memcpy of the chunk,
// the two ends in parallel and the slot still in cache for the reader.
//
// In round 1 this rank also copies its own block into place, one chunk
// after each chunk it stages, so its peers have the next chunk to take
// while it copies.
//
// A first round trades the block size with every peer, so every rank of a
// group in which any two disagree about it raises MismatchError before
// data moves.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/collective.hpp"
#include "collectives/staged_link.hpp"
#include "common/error.hpp"

namespace ucxcoll {
namespace {

constexpr uint32_t kDataSlot = 0;
constexpr uint32_t kHelloSlot = 1;
constexpr uint32_t kBackSlot = 2;
constexpr uint32_t kSizesSlot = 3;

}  // namespace

Task alltoallStaged(Collective& c, std::span<const Block> sends, std::span<const Block> receives) {
  c.begin(tag::Routine::AlltoallStaged);
  const int n = c.size();
  const int me = c.rank();
  const std::size_t bytes = sends[me].bytes;
  auto* const mine = static_cast<std::byte*>(receives[me].data);
  const auto* const own = static_cast<const std::byte*>(sends[me].data);
  std::size_t ownCopied = 0;
  auto copyOwn = [&](std::size_t upTo) {
    if (upTo > ownCopied) {
      copyBytes(mine + ownCopied, own + ownCopied, upTo - ownCopied);
      ownCopied = upTo;
    }
  };

  // Sizes first, with every peer: a round's connect() compares them with
  // its two ends only, and a rank that fails there would leave the ranks
  // it meets in later rounds waiting for the deadline.
  std::vector<uint64_t> theirs(static_cast<std::size_t>(n));
  const uint64_t ours = bytes;
  for (int round = 1; round < n; ++round) {
    c.recv((me - round + n) % n, kSizesSlot, &theirs[(me - round + n) % n], sizeof(uint64_t));
    c.send((me + round) % n, kSizesSlot, &ours, sizeof(uint64_t));
  }
  co_await c.all();
  for (int p = 0; p < n; ++p) {
    if (p != me && theirs[p] != bytes) {
      throw MismatchError(c.name() + ": rank " + std::to_string(c.groupRank(p)) + " works on blocks of " +
                          std::to_string(theirs[p]) + " bytes where this rank works on " + std::to_string(bytes) +
                          " (ranks disagree about the tensor sizes)");
    }
  }

  for (int round = 1; round < n; ++round) {
    const int to = (me + round) % n;
    const int from = (me - round + n) % n;
    const auto* source = static_cast<const std::byte*>(sends[to].data);
    auto* into = static_cast<std::byte*>(receives[from].data);
    RingLinks links(c, from, to, kHelloSlot, kBackSlot);
    co_await links.connect(bytes);
    if (!links.receiveStaged()) {
      c.recv(from, kDataSlot, into, bytes);
    }
    if (!links.sendStaged()) {
      c.send(to, kDataSlot, source, bytes);
    }
    if (links.sendStaged() || links.receiveStaged()) {
      for (std::size_t at = 0; at < bytes; at += kStagingSlotBytes) {
        const std::size_t size = std::min(kStagingSlotBytes, bytes - at);
        if (links.sendStaged()) {
          co_await links.put(kDataSlot, source + at, size);
        }
        if (round == 1) {
          copyOwn(at + size);
        }
        if (links.receiveStaged()) {
          co_await links.take(kDataSlot, size, [&](const std::byte* staged) { std::memcpy(into + at, staged, size); });
        }
      }
    }
    copyOwn(bytes);
    co_await c.all();
    co_await links.drain();
  }
  copyOwn(bytes);
}

}  // namespace ucxcoll
