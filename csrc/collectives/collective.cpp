#include "collectives/collective.hpp"

#include <cstring>
#include <stdexcept>

#include "common/error.hpp"

namespace ucxcoll {

std::byte* Workspace::get(std::size_t bytes) {
  if (bytes > capacity_) {
    // for_overwrite: no zero-filling of memory that is about to be written.
    buffer_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    capacity_ = bytes;
  }
  return buffer_.get();
}

Collective::Collective(std::shared_ptr<Group> group, uint64_t sequence, std::string name,
                       std::chrono::milliseconds timeout, Body body, std::shared_ptr<Workspace> workspace)
    : Operation(Kind::Collective, group, std::move(name), timeout),
      rank_(group->rank()),
      size_(group->size()),
      sequence_(sequence),
      body_(std::move(body)),
      workspace_(workspace ? std::move(workspace) : std::make_shared<Workspace>()) {}

void Collective::begin(tag::Routine routine, int root) {
  if (begun_) {
    throw std::logic_error("Collective::begin called twice by one algorithm");
  }
  routine_ = routine;
  root_ = root;
  begun_ = true;
}

uint64_t Collective::tagFor(uint32_t channel, uint32_t slot) const {
  if (!begun_) {
    throw std::logic_error("an algorithm sent or received before Collective::begin");
  }
  const tag::CollectiveLayout& layout = group()->layout();
  if (tag::isRooted(routine_)) {
    slot = layout.rootedSlot(static_cast<uint32_t>(root_), slot);
  }
  return layout.make(channel, routine_, sequence_, slot);
}

Request& Collective::send(int peer, uint32_t slot, const void* data, std::size_t bytes) {
  return sendTagged(peer, tagFor(group()->peerChannel(peer), slot), data, bytes);
}

Request& Collective::sendSync(int peer, uint32_t slot, const void* data, std::size_t bytes) {
  return sendTagged(peer, tagFor(group()->peerChannel(peer), slot), data, bytes, SendMode::Synchronous);
}

Request& Collective::recv(int peer, uint32_t slot, void* data, std::size_t bytes) {
  return recvTagged(peer, tagFor(group()->channel(), slot), tag::kMatchAll, data, bytes);
}

std::string Collective::describe(tag::Routine routine, uint32_t root) const {
  std::string text = tag::collectiveName(routine);
  if (tag::isRooted(routine)) {
    text += " from rank " + std::to_string(root);
  }
  return text + " (" + tag::algorithmName(routine) + " algorithm)";
}

std::exception_ptr Collective::checkForDisagreement(Transport& transport) {
  if (!begun_) {
    return nullptr;
  }
  // A message for this sequence number that this collective cannot match:
  // a peer runs another collective, algorithm or root under this number.
  const tag::CollectiveLayout& layout = group()->layout();
  const uint64_t mine = layout.make(group()->channel(), routine_, sequence_, 0);
  auto found = transport.probe(mine, layout.sameCollectiveMask());
  if (!found) {
    return nullptr;
  }
  tag::Routine theirs = layout.routine(found->senderTag);
  uint32_t theirRoot = layout.root(found->senderTag);
  bool sameRoutine = theirs == routine_;
  if (sameRoutine && (!tag::isRooted(routine_) || theirRoot == static_cast<uint32_t>(root_))) {
    // A message of this very collective that arrived before its receive
    // was posted. Another routine may still hide behind it: look for each.
    for (tag::Routine routine : tag::kRoutines) {
      if (routine == routine_) {
        continue;
      }
      uint64_t candidate = layout.make(group()->channel(), routine, sequence_, 0);
      if (auto hidden = transport.probe(candidate, layout.sameCollectiveMask() | tag::kRoutineFieldMask)) {
        theirs = routine;
        theirRoot = layout.root(hidden->senderTag);
        sameRoutine = false;
        break;
      }
    }
    if (sameRoutine) {
      return nullptr;
    }
  }
  return std::make_exception_ptr(MismatchError(
      name() + ": ranks disagree about collective #" + std::to_string(sequence_) + ": this rank runs " +
      describe(routine_, static_cast<uint32_t>(root_)) + ", but a peer sent a message of " +
      describe(theirs, theirRoot) + " for it; every rank must call the same collectives, in the same order, " +
      "with the same root and tensor sizes"));
}

std::string Collective::mismatchHint() const {
  return " (ranks disagree about the tensor sizes)";
}

void copyBytes(void* destination, const void* source, std::size_t bytes) {
  if (destination != source && bytes > 0) {
    std::memmove(destination, source, bytes);
  }
}

}  // namespace ucxcoll
