#pragma once
// Shared memory between processes of one host: the one layer under both
// shared-memory mechanisms of ucxcoll (the small-message lanes of
// SharedMemoryTransport and the staged links of large collectives).
//
// A segment is a memfd of the process that creates it. Another process
// opens it through /proc/<pid>/fd/<fd> (allowed where CMA is: same user,
// same pid namespace) and checks that it got the very file offered (device
// and inode) on the very machine (hostIdentity()). Nothing is ever named in
// a file system, so nothing is left behind when a process dies.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/file_descriptor.hpp"

namespace ucxcoll {

// What a process tells a peer so that the peer can map one of its segments.
struct SegmentOffer {
  uint64_t host = 0;  // hostIdentity() of the owner; 0: nothing offered
  uint64_t device = 0;
  uint64_t inode = 0;
  int32_t pid = 0;
  int32_t fd = -1;
};

// Tells apart the places where processes can share memory: a hash of the
// boot id (machines and reboots), the pid namespace (/proc/<pid> must name
// the same process for both) and the user. 0 where peers are to be treated
// as on other hosts (UCXCOLL_PEERS_ON_OTHER_HOSTS) or it cannot be read.
uint64_t hostIdentity();

// A whole mapping; unmapped on destruction.
class Mapping {
 public:
  Mapping(void* address, std::size_t bytes) : address_(address), bytes_(bytes) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
  std::byte* data() const { return static_cast<std::byte*>(address_); }
  std::size_t size() const { return bytes_; }

 private:
  void* address_;
  std::size_t bytes_;
};

// A segment this process owns, mapped read-write (zero-filled at first).
class OwnedSegment {
 public:
  // Null where no memfd can be made or hostIdentity() is 0.
  static std::unique_ptr<OwnedSegment> create(const char* name, std::size_t bytes);
  std::byte* data() const { return mapping_->data(); }
  std::size_t size() const { return mapping_->size(); }
  const SegmentOffer& offer() const { return offer_; }

 private:
  OwnedSegment(FileDescriptor fd, std::unique_ptr<Mapping> mapping, SegmentOffer offer)
      : fd_(std::move(fd)), mapping_(std::move(mapping)), offer_(offer) {}
  FileDescriptor fd_;
  std::unique_ptr<Mapping> mapping_;
  SegmentOffer offer_;
};

// Whether the owner of `offer` (a process on this host) has verifiably
// closed it: its /proc/<pid>/fd entry is gone or now names another file.
// False where the entry exists or cannot be looked at (no permission,
// another host), so that only a withdrawal counts.
bool offerWithdrawn(const SegmentOffer& offer);

// Maps `bytes` of another process's offered segment, or returns null (with
// the reason in `why`, if given) where it cannot: another host, another pid
// namespace, no permission, a smaller or different file.
std::unique_ptr<Mapping> mapOfferedSegment(const SegmentOffer& offer, std::size_t bytes, bool writable,
                                           const char** why = nullptr);

}  // namespace ucxcoll
