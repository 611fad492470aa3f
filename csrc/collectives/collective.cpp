#include "collectives/collective.hpp"

#include <cstring>

#include "transport/tag.hpp"

namespace ucxcoll {

std::byte* Workspace::get(std::size_t bytes) {
  if (bytes > capacity_) {
    // for_overwrite: no zero-filling of memory that is about to be written.
    buffer_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    capacity_ = bytes;
  }
  return buffer_.get();
}

Collective::Collective(Transport& transport, uint32_t groupId, uint32_t sequence, Deadline deadline, std::string name,
                       Workspace* workspace)
    : transport_(transport),
      rank_(transport.rank()),
      size_(transport.size()),
      groupId_(groupId),
      sequence_(sequence),
      deadline_(deadline),
      name_(std::move(name)),
      workspace_(workspace != nullptr ? workspace : &ownWorkspace_) {}

void Collective::send(int peer, uint32_t step, const void* data, std::size_t bytes) {
  transport_.postSend(peer, tag::make(groupId_, sequence_, step, static_cast<uint32_t>(rank_)), data, bytes);
}

void Collective::recv(int peer, uint32_t step, void* data, std::size_t bytes) {
  transport_.postRecv(peer, tag::make(groupId_, sequence_, step, static_cast<uint32_t>(peer)), data, bytes);
}

void Collective::wait() {
  transport_.waitAll(deadline_, name_);
}

void copyBytes(void* destination, const void* source, std::size_t bytes) {
  if (destination != source && bytes > 0) {
    std::memmove(destination, source, bytes);
  }
}

}  // namespace ucxcoll
