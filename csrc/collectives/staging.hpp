#pragma once
// Shared-memory staging between ranks on one host.
//
// On one host UCX moves a large message with one kernel copy (CMA,
// process_vm_readv). That copy runs at a third of memcpy's speed here and
// leaves the reduction a second pass over the data. A staged link instead
// has the sender copy each chunk into a few slots of memory the receiver
// has mapped too; the receiver reduces (or copies) straight out of them.
// Only small tokens travel over the transport: "chunk k is in slot k % n"
// and "slot k % n is free again", so all ordering, deadlines and mismatch
// detection stay with the tagged messages.
//
// The memory is a segment of the sending process (transport/
// shared_segment.hpp) that the receiver maps read-only. Where that fails
// the link falls back to plain messages; the two ends agree on that per
// operation.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "transport/shared_segment.hpp"

namespace ucxcoll {

// Slots per link and their size: chunks this big stay in the caches
// between the sender's copy and the receiver's read.
inline constexpr std::size_t kStagingSlots = 8;
inline constexpr std::size_t kStagingSlotBytes = std::size_t{256} << 10;
inline constexpr std::size_t kStagingBytes = kStagingSlots * kStagingSlotBytes;

// What a sender tells its receiver about its staging memory; sent as bytes.
using StagingOffer = SegmentOffer;

// Staging memory this process lends to one operation's outgoing link;
// back to the pool when destroyed.
class StagingLease {
 public:
  struct Segment;
  StagingLease() = default;
  explicit StagingLease(std::shared_ptr<Segment> segment);
  StagingLease(StagingLease&&) noexcept = default;
  StagingLease& operator=(StagingLease&&) noexcept = default;
  ~StagingLease();

  explicit operator bool() const { return segment_ != nullptr; }
  // Lets the segment go without giving it back to the pool, for an
  // operation that ended before its receiver freed every slot: the
  // receiver may still be reading it, so no later operation may write it.
  void abandon() { segment_.reset(); }
  std::byte* data() const;
  StagingOffer offer() const;

 private:
  std::shared_ptr<Segment> segment_;
};

// kStagingBytes of staging memory for group rank `rank`, or an empty lease
// where staging is turned off (UCXCOLL_SHARED_MEMORY=0) or not possible.
StagingLease leaseStaging(int rank);

// The offered staging memory of another process mapped into this one (kept
// mapped for the life of the process), or null where it cannot be: another
// host, another pid namespace, no permission, or nothing offered.
const std::byte* mapStaging(const StagingOffer& offer);

// Whether an operation of `bytes` per rank stages at all: from
// stagingMinBytes() on.
bool worthStaging(std::size_t bytes);
// UCXCOLL_STAGING_MIN_BYTES, unless a test set another bar.
std::size_t stagingMinBytes();

// For tests: which ranks offer staging (default: all, unless the
// configuration turns it off), and from which size on (nullopt: as
// configured).
enum class StagingPolicy { AsConfigured, Never, EvenRanksOnly };
void setStagingPolicyForTests(StagingPolicy policy, std::optional<std::size_t> minBytes = std::nullopt);
// For tests: how many leases with staging memory this process handed out.
std::size_t stagingLeasesHandedOut();

}  // namespace ucxcoll
