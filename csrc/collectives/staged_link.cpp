#include "collectives/staged_link.hpp"

#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.hpp"

namespace ucxcoll {

RingLinks::RingLinks(Collective& c, uint32_t helloSlot, uint32_t backSlot)
    : RingLinks(c, (c.rank() - 1 + c.size()) % c.size(), (c.rank() + 1) % c.size(), helloSlot, backSlot) {}

RingLinks::RingLinks(Collective& c, int left, int right, uint32_t helloSlot, uint32_t backSlot)
    : c_(c), left_(left), right_(right), helloSlot_(helloSlot), backSlot_(backSlot) {}

RingLinks::~RingLinks() {
  if (freed_ != put_) {
    lease_.abandon();
  }
}

const uint64_t& RingLinks::token(uint64_t value) {
  return outgoing_.emplace_back(value);
}

Task RingLinks::connect(uint64_t bytes) {
  // Ranks that disagree about the size cut different blocks, and a rank
  // whose messages all happen to fit could finish with data that does not
  // add up. So neighbours first compare sizes: a rank next to one that
  // disagrees raises at once, and the ring cannot complete without it.
  // Both ends see the same byte count (or fail below), so they skip the
  // staging round alike for small operations.
  const bool large = worthStaging(bytes);
  if (large) {
    lease_ = leaseStaging(c_.rank());
  }
  mine_ = Hello{bytes, lease_.offer(), c_.rank()};
  c_.recv(left_, helloSlot_, &fromLeft_, sizeof(Hello));
  c_.recv(right_, helloSlot_, &fromRight_, sizeof(Hello));
  c_.send(left_, helloSlot_, &mine_, sizeof(Hello));
  c_.send(right_, helloSlot_, &mine_, sizeof(Hello));
  co_await c_.all();
  // With two ranks both neighbours are one peer, whose two hellos share a
  // tag: either may have landed in either place.
  if (fromLeft_.rank != left_) {
    std::swap(fromLeft_, fromRight_);
  }
  for (const auto& [peer, theirs] : {std::pair{left_, fromLeft_.bytes}, std::pair{right_, fromRight_.bytes}}) {
    if (theirs != bytes) {
      throw MismatchError(c_.name() + ": rank " + std::to_string(c_.groupRank(peer)) + " works on " +
                          std::to_string(theirs) + " bytes where this rank works on " + std::to_string(bytes) +
                          " (ranks disagree about the tensor sizes)");
    }
  }

  if (!large) {
    co_return;
  }
  // The receiver of a link decides: it stages when it can map the
  // sender's segment, and says so.
  leftSlots_ = mapStaging(fromLeft_.offer);
  c_.recv(right_, backSlot_, &rightVerdict_, sizeof(rightVerdict_));
  c_.send(left_, backSlot_, &token(leftSlots_ != nullptr ? 1 : 0), sizeof(uint64_t));
  co_await c_.all();
  sendStaged_ = lease_ && rightVerdict_ == 1;
}

Task RingLinks::put(uint32_t slot, const std::byte* data, std::size_t bytes) {
  if (put_ - freed_ == kStagingSlots) {
    co_await c_.recv(right_, backSlot_, &incoming_, sizeof(incoming_));
    ++freed_;
  }
  std::memcpy(lease_.data() + (put_ % kStagingSlots) * kStagingSlotBytes, data, bytes);
  ++put_;
  // The copy must be visible before the token that announces it.
  std::atomic_thread_fence(std::memory_order_release);
  c_.send(right_, slot, &token(bytes), sizeof(uint64_t));
}

Task RingLinks::take(uint32_t slot, std::size_t bytes, const std::function<void(const std::byte*)>& consume) {
  co_await c_.recv(left_, slot, &incoming_, sizeof(incoming_));
  std::atomic_thread_fence(std::memory_order_acquire);
  if (incoming_ != bytes) {
    throw MismatchError(c_.name() + ": rank " + std::to_string(c_.groupRank(left_)) + " staged a chunk of " +
                        std::to_string(incoming_) + " bytes where this rank expected " + std::to_string(bytes) +
                        " (ranks disagree about the tensor sizes)");
  }
  consume(leftSlots_ + (taken_ % kStagingSlots) * kStagingSlotBytes);
  ++taken_;
  std::atomic_thread_fence(std::memory_order_release);
  c_.send(left_, backSlot_, &token(taken_), sizeof(uint64_t));
}

Task RingLinks::drain() {
  while (freed_ < put_) {
    co_await c_.recv(right_, backSlot_, &incoming_, sizeof(incoming_));
    ++freed_;
  }
}

}  // namespace ucxcoll
