#include "collectives/staging.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/config.hpp"
#include "common/file_descriptor.hpp"
#include "common/logging.hpp"

namespace ucxcoll {

// A mapping of a whole file; unmapped on destruction.
class Mapping {
 public:
  Mapping(void* address, std::size_t bytes) : address_(address), bytes_(bytes) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(address_, bytes_); }
  std::byte* data() const { return static_cast<std::byte*>(address_); }

 private:
  void* address_;
  std::size_t bytes_;
};

struct StagingLease::Segment {
  FileDescriptor fd;
  std::unique_ptr<Mapping> mapping;
  StagingOffer offer;
};

namespace {

std::atomic<StagingPolicy> policy{StagingPolicy::AsConfigured};
std::atomic<std::size_t> minimumBytes{kStagingMinBytes};

// The boot id tells machines (and reboots) apart where pids and inode
// numbers repeat; hashed (FNV-1a) to fit the offer. None (0, no staging)
// where peers are to be treated as on other hosts.
uint64_t hostKey() {
  static const uint64_t key = [] {
    if (config().peersOnOtherHosts) {
      return uint64_t{0};
    }
    std::ifstream file("/proc/sys/kernel/random/boot_id");
    std::string bootId;
    std::getline(file, bootId);
    uint64_t hash = 1469598103934665603ull;
    for (char c : bootId) {
      hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    return bootId.empty() ? 0 : (hash | 1);  // never 0, which means "none"
  }();
  return key;
}

std::unique_ptr<Mapping> mapWhole(int fd, int protection) {
  void* address = ::mmap(nullptr, kStagingBytes, protection, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    return nullptr;
  }
  return std::make_unique<Mapping>(address, kStagingBytes);
}

std::shared_ptr<StagingLease::Segment> createSegment() {
  FileDescriptor fd(::memfd_create("ucxcoll-staging", MFD_CLOEXEC));
  struct stat info {};
  if (fd.get() < 0 || ::ftruncate(fd.get(), static_cast<off_t>(kStagingBytes)) != 0 || ::fstat(fd.get(), &info) != 0) {
    return nullptr;
  }
  auto mapping = mapWhole(fd.get(), PROT_READ | PROT_WRITE);
  if (!mapping || hostKey() == 0) {
    return nullptr;
  }
  auto segment = std::make_shared<StagingLease::Segment>();
  segment->offer = StagingOffer{hostKey(), info.st_dev, info.st_ino, static_cast<int32_t>(::getpid()), fd.get()};
  segment->fd = std::move(fd);
  segment->mapping = std::move(mapping);
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
      if (owner_ != ::getpid()) {
        free_.clear();
        owner_ = ::getpid();
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
  pid_t owner_ = ::getpid();
  std::vector<std::shared_ptr<StagingLease::Segment>> free_;
};

SegmentPool& pool() {
  static SegmentPool instance;
  return instance;
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
    const std::string path = "/proc/" + std::to_string(offer.pid) + "/fd/" + std::to_string(offer.fd);
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat info {};
    if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0) {
      UCXCOLL_INFO("staging: cannot open " << path << "; that link uses plain messages");
      return nullptr;
    }
    if (info.st_dev != offer.device || info.st_ino != offer.inode ||
        static_cast<std::size_t>(info.st_size) < kStagingBytes) {
      UCXCOLL_INFO("staging: " << path << " is not the offered segment (another pid namespace?)");
      return nullptr;
    }
    return mapWhole(fd.get(), PROT_READ);
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
  return segment_->mapping->data();
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
  return StagingLease(pool().take());
}

const std::byte* mapStaging(const StagingOffer& offer) {
  if (offer.host == 0 || offer.host != hostKey()) {
    return nullptr;
  }
  static PeerMappings mappings;
  return mappings.map(offer);
}

bool worthStaging(std::size_t bytes) {
  return bytes >= minimumBytes.load();
}

void setStagingPolicyForTests(StagingPolicy value, std::size_t minBytes) {
  policy.store(value);
  minimumBytes.store(minBytes);
}

}  // namespace ucxcoll
