// Pipelined chain broadcast for large messages. The ranks form a chain
// along the ring, starting at the root: root -> root+1 -> ... -> root-1.
// The message moves in chunks, and a rank passes chunk k on as soon as it
// has it, while chunk k+1 is still on its way in: every link is busy at
// once, so the time is about one chunk per link plus the message's time on
// one link, where the binomial tree sends the whole message log2(n) times
// in a row and keeps the root's link busy for all of them.
//
// Each link is staged through shared memory (staged_link.hpp) where its
// two ends can share it: the sender copies a chunk into a slot and the
// receiver copies it out into its buffer, both cores copying at once at
// memcpy speed, where UCX's rendezvous makes one CMA copy at a third of
// it. A plain link carries each chunk as one message straight into place,
// every receive posted up front (they arrive in order on one slot).
//
// connect() has each rank trade its byte count with both neighbours, so
// every rank (the root too) receives from its peers before it sends any
// data: ranks that disagree about the size raise MismatchError, and a root
// whose peers run something else waits and sees their messages instead of
// returning. The last rank's link back to the root carries only that.

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/collective.hpp"
#include "collectives/staged_link.hpp"

namespace ucxcoll {
namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr uint32_t kDataSlot = 0;
constexpr uint32_t kHelloSlot = 1;
constexpr uint32_t kBackSlot = 2;

}  // namespace

Task broadcastPipelined(Collective& c, void* buffer, std::size_t bytes, int root) {
  c.begin(tag::Routine::BroadcastPipelined, static_cast<uint32_t>(root));
  const int n = c.size();
  if (n == 1) {
    co_return;
  }
  const int position = (c.rank() - root + n) % n;
  const bool receives = position != 0;
  const bool sends = position != n - 1;
  const int left = (c.rank() - 1 + n) % n;
  const int right = (c.rank() + 1) % n;

  RingLinks links(c, kHelloSlot, kBackSlot);
  co_await links.connect(bytes);
  auto* data = static_cast<std::byte*>(buffer);
  const std::size_t receiveChunk = links.receiveChunkBytes(kChunkBytes);
  const std::size_t sendChunk = links.sendChunkBytes(kChunkBytes);

  std::vector<Request*> arriving;
  if (receives && !links.receiveStaged()) {
    for (std::size_t at = 0; at < bytes; at += receiveChunk) {
      arriving.push_back(&c.recv(left, kDataSlot, data + at, std::min(receiveChunk, bytes - at)));
    }
  }
  // `have`: how much of the buffer is in place; `sent`: how much of it has
  // gone on. The two directions may cut different chunks (a staging slot
  // or a plain chunk), so a chunk is sent once all its bytes are here.
  std::size_t have = receives ? 0 : bytes;
  std::size_t sent = 0;
  std::size_t next = 0;  // the next plain receive to wait for
  while ((receives && have < bytes) || (sends && sent < bytes)) {
    if (receives && have < bytes) {
      const std::size_t size = std::min(receiveChunk, bytes - have);
      if (links.receiveStaged()) {
        co_await links.take(kDataSlot, size, [&](const std::byte* staged) { std::memcpy(data + have, staged, size); });
      } else {
        co_await *arriving[next++];
      }
      have += size;
    }
    while (sends && sent < bytes && sent + std::min(sendChunk, bytes - sent) <= have) {
      const std::size_t size = std::min(sendChunk, bytes - sent);
      if (links.sendStaged()) {
        co_await links.put(kDataSlot, data + sent, size);
      } else {
        c.send(right, kDataSlot, data + sent, size);
      }
      sent += size;
    }
  }
  co_await c.all();
  co_await links.drain();
}

}  // namespace ucxcoll
