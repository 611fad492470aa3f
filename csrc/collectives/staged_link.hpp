#pragma once
// The two links of one rank in a ring during one collective: this rank to
// its right neighbour (it sends) and its left neighbour to this rank (it
// receives); "left" and "right" may be any two peers. Each link is either staged through the sender's shared memory
// (staging.hpp), when both ends are on one host and the receiver could map
// the sender's segment, or carries plain messages. The ends of a link agree
// on which in connect(); the two links of a rank may differ.
//
// On a staged link a chunk travels as
//   sender:   wait until slot k % kStagingSlots is free, copy the chunk in,
//             send "ready" (its byte count) on the phase's slot
//   receiver: receive "ready", consume the chunk straight from the slot
//             (reduce or copy), send "free" back on the back slot.
// Tokens between two ranks with one tag arrive in order, so a counter on
// each side names the slot.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>

#include "collectives/collective.hpp"
#include "collectives/staging.hpp"

namespace ucxcoll {

class RingLinks {
 public:
  // Hello messages go both ways on helloSlot; verdicts and "free" tokens
  // flow from right to left on backSlot.
  RingLinks(Collective& c, uint32_t helloSlot, uint32_t backSlot);
  // The same two links with other ends: this rank receives from `left`
  // and sends to `right` (a round of a pairwise exchange).
  RingLinks(Collective& c, int left, int right, uint32_t helloSlot, uint32_t backSlot);
  // An operation that failed before drain() completed abandons its
  // staging memory instead of giving it back to the pool.
  ~RingLinks();
  RingLinks(const RingLinks&) = delete;
  RingLinks& operator=(const RingLinks&) = delete;

  // Exchanges with both neighbours the byte count this rank works on and
  // its staging offer; throws MismatchError where a neighbour's count
  // differs. Then agrees with each neighbour whether their link is staged.
  Task connect(uint64_t bytes);

  bool sendStaged() const { return sendStaged_; }
  bool receiveStaged() const { return leftSlots_ != nullptr; }
  // The chunk size of each direction: a staging slot where staged.
  std::size_t sendChunkBytes(std::size_t plain) const { return sendStaged_ ? kStagingSlotBytes : plain; }
  std::size_t receiveChunkBytes(std::size_t plain) const { return receiveStaged() ? kStagingSlotBytes : plain; }

  // Staged send of one chunk (at most kStagingSlotBytes), announced on `slot`.
  Task put(uint32_t slot, const std::byte* data, std::size_t bytes);
  // Staged receive of the next chunk, announced on `slot`: `consume` gets
  // it in the sender's memory, valid until it returns.
  Task take(uint32_t slot, std::size_t bytes, const std::function<void(const std::byte*)>& consume);
  // Waits until the right neighbour freed every slot, so that the staging
  // memory can go back to the pool.
  Task drain();

 private:
  struct Hello {
    uint64_t bytes = 0;
    StagingOffer offer;
    int64_t rank = -1;  // the sender
  };

  const uint64_t& token(uint64_t value);

  Collective& c_;
  const int left_;
  const int right_;
  const uint32_t helloSlot_;
  const uint32_t backSlot_;
  StagingLease lease_;
  bool sendStaged_ = false;
  const std::byte* leftSlots_ = nullptr;
  uint64_t put_ = 0;    // chunks this rank staged
  uint64_t freed_ = 0;  // of those, freed by the right neighbour
  uint64_t taken_ = 0;  // chunks taken from the left neighbour
  uint64_t incoming_ = 0;
  Hello mine_, fromLeft_, fromRight_;
  uint64_t rightVerdict_ = 0;
  std::deque<uint64_t> outgoing_;  // tokens until their sends end (stable addresses)
};

}  // namespace ucxcoll
