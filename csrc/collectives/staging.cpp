#include "collectives/staging.hpp"

#include <unistd.h>

#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/config.hpp"
#include "common/immortal.hpp"
#include "common/logging.hpp"
#include "common/process_id.hpp"

namespace ucxcoll {

struct StagingLease::Segment {
  std::unique_ptr<OwnedSegment> memory;
  StagingOffer offer;
};

namespace {

std::atomic<StagingPolicy> policy{StagingPolicy::AsConfigured};
// A test's bar, or kConfiguredMinimum for UCXCOLL_STAGING_MIN_BYTES.
constexpr std::size_t kConfiguredMinimum = std::numeric_limits<std::size_t>::max();
std::atomic<std::size_t> minimumBytes{kConfiguredMinimum};
std::atomic<std::size_t> leasesHandedOut{0};

std::shared_ptr<StagingLease::Segment> createSegment() {
  auto memory = OwnedSegment::create("ucxcoll-staging", kStagingBytes);
  if (!memory) {
    return nullptr;
  }
  auto segment = std::make_shared<StagingLease::Segment>();
  segment->offer = memory->offer();
  segment->memory = std::move(memory);
  return segment;
}

// Segments are reused, never closed while the process lives: an offer's
// (pid, fd) then names one segment for good, and receivers may cache
// their mapping of it.
class SegmentPool {
 public:
  std::shared_ptr<StagingLease::Segment> take() {
    {
      std::lock_guard lock(mutex_);
      // A forked child must not offer its parent's segments: they name the
      // parent's pid, and the parent still uses them.
      if (owner_ != currentProcessId()) {
        free_.clear();
        owner_ = currentProcessId();
      }
      if (!free_.empty()) {
        auto segment = std::move(free_.back());
        free_.pop_back();
        return segment;
      }
    }
    return createSegment();
  }
  void give(std::shared_ptr<StagingLease::Segment> segment) {
    std::lock_guard lock(mutex_);
    if (segment->offer.pid == owner_) {
      free_.push_back(std::move(segment));
    }
  }

 private:
  std::mutex mutex_;
  pid_t owner_ = currentProcessId();
  std::vector<std::shared_ptr<StagingLease::Segment>> free_;
};

// Never destroyed (common/immortal.hpp): first used on whichever thread
// drives the first staged collective.
SegmentPool& pool() {
  return immortal<SegmentPool>();
}

// Receivers' mappings of other processes' segments, by offer.
class PeerMappings {
 public:
  const std::byte* map(const StagingOffer& offer) {
    const auto key = std::tuple(offer.pid, offer.fd, offer.device, offer.inode);
    std::lock_guard lock(mutex_);
    if (auto found = mappings_.find(key); found != mappings_.end()) {
      return found->second ? found->second->data() : nullptr;
    }
    auto mapping = open(offer);
    const std::byte* data = mapping ? mapping->data() : nullptr;
    mappings_.emplace(key, std::move(mapping));
    return data;
  }

 private:
  static std::unique_ptr<Mapping> open(const StagingOffer& offer) {
    const char* why = nullptr;
    auto mapping = mapOfferedSegment(offer, kStagingBytes, false, &why);
    if (!mapping) {
      UCXCOLL_INFO("staging: cannot map the segment of pid " << offer.pid << " (" << why
                                                             << "); that link uses plain messages");
    }
    return mapping;
  }

  std::mutex mutex_;
  std::map<std::tuple<int32_t, int32_t, uint64_t, uint64_t>, std::unique_ptr<Mapping>> mappings_;
};

}  // namespace

StagingLease::StagingLease(std::shared_ptr<Segment> segment) : segment_(std::move(segment)) {}

StagingLease::~StagingLease() {
  if (segment_) {
    pool().give(std::move(segment_));
  }
}

std::byte* StagingLease::data() const {
  return segment_->memory->data();
}

StagingOffer StagingLease::offer() const {
  return segment_ ? segment_->offer : StagingOffer{};
}

StagingLease leaseStaging(int rank) {
  switch (policy.load()) {
    case StagingPolicy::Never:
      return {};
    case StagingPolicy::EvenRanksOnly:
      if (rank % 2 != 0) {
        return {};
      }
      break;
    case StagingPolicy::AsConfigured:
      if (!config().sharedMemory) {
        return {};
      }
      break;
  }
  auto segment = pool().take();
  if (segment) {
    leasesHandedOut.fetch_add(1);
  }
  return StagingLease(std::move(segment));
}

std::size_t stagingLeasesHandedOut() {
  return leasesHandedOut.load();
}

const std::byte* mapStaging(const StagingOffer& offer) {
  if (offer.host == 0 || offer.host != hostIdentity()) {
    return nullptr;
  }
  // Never destroyed (common/immortal.hpp): first used on the driver, often
  // the progress thread, mid-collective.
  return immortal<PeerMappings>().map(offer);
}

std::size_t stagingMinBytes() {
  const std::size_t set = minimumBytes.load();
  return set == kConfiguredMinimum ? config().stagingMinBytes : set;
}

bool worthStaging(std::size_t bytes) {
  return bytes >= stagingMinBytes();
}

void setStagingPolicyForTests(StagingPolicy value, std::optional<std::size_t> minBytes) {
  policy.store(value);
  minimumBytes.store(minBytes.value_or(kConfiguredMinimum));
}

}  // namespace ucxcoll
