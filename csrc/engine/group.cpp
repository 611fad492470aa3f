#include "engine/group.hpp"

#include <stdexcept>

#include "common/fnv1a.hpp"

namespace ucxcoll {

Group::Group(std::string name, int rank, int size, uint32_t channel, std::vector<PeerHandle> peers,
             std::vector<uint32_t> peerChannels)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      channel_(channel),
      peers_(std::move(peers)),
      peerChannels_(std::move(peerChannels)),
      processes_(static_cast<std::size_t>(size)),
      topology_(std::vector<int>(static_cast<std::size_t>(size), 0), rank),
      layout_(static_cast<uint32_t>(size)),
      nameValue_(tag::internalValueOf(fnv1a(name_.data(), name_.size()))) {}

void Group::setHosts(const std::vector<int>& hostOf) {
  if (hostOf.size() != static_cast<std::size_t>(size_)) {
    throw std::invalid_argument("Group::setHosts: " + std::to_string(hostOf.size()) + " hosts for " +
                                std::to_string(size_) + " ranks");
  }
  topology_ = HostTopology(hostOf, rank_);
}

std::string Group::failure() const {
  std::lock_guard<std::mutex> lock(failureMutex_);
  return failure_;
}

void Group::setFailure(const std::string& cause, bool notify) {
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (!failure_.empty()) {
      return;
    }
    failure_ = cause;
    failed_.store(true, std::memory_order_release);
  }
  if (notify) {
    notifyFailure();
  }
}

void Group::notifyFailure() {
  std::function<void(const std::string&)> listener;
  std::string cause;
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (failure_.empty()) {
      return;
    }
    listener = std::move(failureListener_);
    failureListener_ = nullptr;
    cause = failure_;
  }
  if (listener) {
    listener(cause);
  }
}

void Group::setFailureListener(std::function<void(const std::string&)> listener) {
  std::lock_guard<std::mutex> lock(failureMutex_);
  failureListener_ = std::move(listener);
}

}  // namespace ucxcoll
