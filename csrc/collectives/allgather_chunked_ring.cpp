// Chunked ring all-gather for large messages: the ring of allgather_ring.cpp
// (in step s each rank passes on the block it received in step s-1), with
// each link staged through shared memory (staged_link.hpp) where its two
// ends can share it. A staged link moves a block in slot-sized chunks: the
// sender copies chunk k in and the receiver copies it out into place while
// chunk k+1 is being copied in, both cores at memcpy speed, where UCX's
// rendezvous makes one CMA copy at a third of it. A plain link carries
// whole blocks straight into place, every receive posted up front (they
// come from the left neighbour in order, so they share one slot).
//
// In step 0 a rank sends from its input and copies the input into its own
// block meanwhile: over a staged link chunk by chunk, while the chunk is
// still in cache; over a plain one while the neighbour fetches it.
//
// connect() has each rank trade its byte count with both neighbours, so
// ranks that disagree about the size raise MismatchError before any data
// moves.

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/collective.hpp"
#include "collectives/staged_link.hpp"

namespace ucxcoll {
namespace {

constexpr uint32_t kDataSlot = 0;
constexpr uint32_t kHelloSlot = 1;
constexpr uint32_t kBackSlot = 2;

}  // namespace

Task allgatherChunkedRing(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  c.begin(tag::Routine::AllgatherChunkedRing);
  const int n = c.size();
  const int me = c.rank();
  const auto* own = static_cast<const std::byte*>(input);
  auto* mine = static_cast<std::byte*>(outputs[me]);
  if (n == 1) {
    copyBytes(mine, own, bytes);
    co_return;
  }
  const int right = (me + 1) % n;
  const int left = (me - 1 + n) % n;
  auto block = [&](int b) { return static_cast<std::byte*>(outputs[b]); };
  auto sentInStep = [&](int step) { return (me - step + n) % n; };
  auto receivedInStep = [&](int step) { return (me - step - 1 + n) % n; };

  RingLinks links(c, kHelloSlot, kBackSlot);
  co_await links.connect(bytes);

  std::vector<Request*> arriving;
  if (!links.receiveStaged()) {
    for (int step = 0; step < n - 1; ++step) {
      arriving.push_back(&c.recv(left, kDataSlot, block(receivedInStep(step)), bytes));
    }
  }
  for (int step = 0; step < n - 1; ++step) {
    const std::byte* source = step == 0 ? own : block(sentInStep(step));
    if (step > 0 && !links.receiveStaged()) {
      co_await *arriving[step - 1];  // the block to pass on
    }
    if (!links.sendStaged()) {
      c.send(right, kDataSlot, source, bytes);
      if (step == 0) {
        copyBytes(mine, own, bytes);
      }
    }
    if (!links.sendStaged() && !links.receiveStaged()) {
      continue;
    }
    std::byte* into = block(receivedInStep(step));
    for (std::size_t at = 0; at < bytes; at += kStagingSlotBytes) {
      const std::size_t size = std::min(kStagingSlotBytes, bytes - at);
      if (links.sendStaged()) {
        co_await links.put(kDataSlot, source + at, size);
        if (step == 0) {
          copyBytes(mine + at, own + at, size);
        }
      }
      if (links.receiveStaged()) {
        co_await links.take(kDataSlot, size, [&](const std::byte* staged) { std::memcpy(into + at, staged, size); });
      }
    }
  }
  co_await c.all();
  co_await links.drain();
}

}  // namespace ucxcoll
