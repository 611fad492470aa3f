#include "transport/shared_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>

#include <fstream>
#include <string>

#include "common/config.hpp"

namespace ucxcoll {

Mapping::~Mapping() {
  ::munmap(address_, bytes_);
}

uint64_t hostIdentity() {
  static const uint64_t identity = [] {
    if (config().peersOnOtherHosts) {
      return uint64_t{0};
    }
    std::ifstream file("/proc/sys/kernel/random/boot_id");
    std::string text;
    std::getline(file, text);
    if (text.empty()) {
      return uint64_t{0};
    }
    struct stat pidNamespace {};
    if (::stat("/proc/self/ns/pid", &pidNamespace) == 0) {
      text += ":" + std::to_string(pidNamespace.st_ino);
    }
    text += ":" + std::to_string(::getuid());
    uint64_t hash = 1469598103934665603ull;  // FNV-1a
    for (char c : text) {
      hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    return hash | 1;  // never 0, which means "none"
  }();
  return identity;
}

namespace {

std::unique_ptr<Mapping> mapWhole(int fd, std::size_t bytes, int protection) {
  void* address = ::mmap(nullptr, bytes, protection, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    return nullptr;
  }
  return std::make_unique<Mapping>(address, bytes);
}

}  // namespace

std::unique_ptr<OwnedSegment> OwnedSegment::create(const char* name, std::size_t bytes) {
  if (hostIdentity() == 0) {
    return nullptr;
  }
  FileDescriptor fd(::memfd_create(name, MFD_CLOEXEC));
  struct stat info {};
  if (fd.get() < 0 || ::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0 || ::fstat(fd.get(), &info) != 0) {
    return nullptr;
  }
  auto mapping = mapWhole(fd.get(), bytes, PROT_READ | PROT_WRITE);
  if (!mapping) {
    return nullptr;
  }
  SegmentOffer offer{hostIdentity(), info.st_dev, info.st_ino, static_cast<int32_t>(::getpid()), fd.get()};
  return std::unique_ptr<OwnedSegment>(new OwnedSegment(std::move(fd), std::move(mapping), offer));
}

std::unique_ptr<Mapping> mapOfferedSegment(const SegmentOffer& offer, std::size_t bytes, bool writable,
                                           const char** why) {
  auto refuse = [&](const char* reason) -> std::unique_ptr<Mapping> {
    if (why != nullptr) {
      *why = reason;
    }
    return nullptr;
  };
  if (offer.host == 0 || offer.host != hostIdentity()) {
    return refuse("it is on another host");
  }
  const std::string path = "/proc/" + std::to_string(offer.pid) + "/fd/" + std::to_string(offer.fd);
  FileDescriptor fd(::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC));
  struct stat info {};
  if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0) {
    return refuse("its /proc/<pid>/fd entry cannot be opened");
  }
  if (info.st_dev != offer.device || info.st_ino != offer.inode || static_cast<std::size_t>(info.st_size) < bytes) {
    return refuse("the file found is not the one offered");
  }
  auto mapping = mapWhole(fd.get(), bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ);
  return mapping ? std::move(mapping) : refuse("mmap failed");
}

bool offerWithdrawn(const SegmentOffer& offer) {
  if (offer.host == 0 || offer.host != hostIdentity()) {
    return false;
  }
  const std::string path = "/proc/" + std::to_string(offer.pid) + "/fd/" + std::to_string(offer.fd);
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return errno == ENOENT;
  }
  return info.st_dev != offer.device || info.st_ino != offer.inode;
}

}  // namespace ucxcoll
