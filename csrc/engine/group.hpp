#pragma once
// A process group as the engine sees it: who the ranks are, how to reach
// them, the tag channels (this process's and each peer's), the collectives
// waiting for their turn, and the first failure that broke the group.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/host_topology.hpp"
#include "engine/leave_reason.hpp"
#include "engine/peer_watch.hpp"
#include "transport/tag.hpp"
#include "transport/transport.hpp"

namespace ucxcoll {

class Operation;

// When a group connects to its ranks (see Config::connect).
enum class ConnectWhen { AsConfigured, AtSetup, OnFirstMessage };

// Every rank's transport address, indexed by group rank: shared with
// whoever set the group up (the backend's membership), not copied.
using PeerAddresses = std::shared_ptr<const std::vector<std::vector<uint8_t>>>;

class Group {
 public:
  // `peers[r]` reaches group rank r (this rank included); `peerChannels[r]`
  // is rank r's channel for this group, `channel` this process's.
  Group(std::string name, int rank, int size, uint32_t channel, std::vector<PeerHandle> peers,
        std::vector<uint32_t> peerChannels);

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  uint32_t channel() const { return channel_; }
  uint32_t peerChannel(int rank) const { return peerChannels_[static_cast<std::size_t>(rank)]; }
  // Null until this process connects to the rank: at setup, or where the
  // group connects lazily, at the first message to or from it.
  PeerHandle peer(int rank) const { return peers_[static_cast<std::size_t>(rank)]; }
  // How many ranks (this one included) this process has connected to.
  int connectedRanks() const {
    return static_cast<int>(std::count_if(peers_.begin(), peers_.end(), [](PeerHandle p) { return p != nullptr; }));
  }
  // Says why `ranks` cannot be reached, for a rank that turns out to be
  // unreachable at its first message (group setup knows their hosts and
  // network devices); set once, before the group's first operation.
  void setUnreachableDescription(std::function<std::string(const std::vector<int>&)> describe) {
    describeUnreachable_ = std::move(describe);
  }
  const tag::CollectiveLayout& layout() const { return layout_; }

  // Collective sequence numbers, in issue order. The caller makes "take a
  // number, submit" atomic with respect to other submitters of the group.
  uint64_t takeSequence() { return issued_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t issued() const { return issued_.load(std::memory_order_relaxed); }

  // The first error that broke the group; empty while it is healthy.
  // Later collectives fail fast with it.
  std::string failure() const;
  // Keeps the first cause. `notify` false: the failure listener waits until
  // an operation fails by it (notifyFailure), as when a rank left in order
  // and the operations running may still finish.
  void setFailure(const std::string& cause, bool notify = true);
  void notifyFailure();
  // Called once, with the cause, when the group first fails (on the thread
  // that sets the failure, usually the engine's driver: it must not block).
  void setFailureListener(std::function<void(const std::string&)> listener);
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // The process behind each group rank where this process can watch it
  // (same host and pid namespace); unknown elsewhere.
  const ProcessIdentity& process(int rank) const { return processes_.at(static_cast<std::size_t>(rank)); }

  // Whether some host runs more of this group's ranks than it has cores.
  // Every rank of the group computes the same answer from the setup
  // exchange, so algorithms may choose by it; set once, before the group's
  // first operation.
  bool ranksOutnumberCores() const { return ranksOutnumberCores_; }
  // Whether group rank r runs on another host (as group setup found).
  bool onOtherHost(int rank) const {
    return static_cast<std::size_t>(rank) < onOtherHost_.size() && onOtherHost_[static_cast<std::size_t>(rank)];
  }
  void setRanksOutnumberCores(bool outnumber) { ranksOutnumberCores_ = outnumber; }
  // The hostname of each group rank (as group setup read it), to name the
  // host of a rank on another host in errors; set once, before the group's
  // first operation. "" where unknown.
  void setHostNames(std::vector<std::string> names) { hostNames_ = std::move(names); }
  const std::string& hostName(int rank) const {
    static const std::string unknown;
    return static_cast<std::size_t>(rank) < hostNames_.size() ? hostNames_[static_cast<std::size_t>(rank)] : unknown;
  }
  // Which ranks share a host (`hostOf[r]` names rank r's host; ranks with
  // equal numbers share one), as every rank of the group found it alike in
  // group setup, so that algorithms may choose and compose by it; set once,
  // before the group's first operation. Until then: all on one host.
  void setHosts(const std::vector<int>& hostOf);
  const HostTopology& topology() const { return topology_; }
  // The network addresses each group rank offers ("" entries where
  // unknown), as group setup read them; set once, before the group's
  // first operation.
  void setNetworkAddresses(std::vector<std::vector<std::string>> addresses) {
    networkAddresses_ = std::move(addresses);
  }
  const std::vector<std::string>& networkAddresses(int rank) const {
    static const std::vector<std::string> none;
    return static_cast<std::size_t>(rank) < networkAddresses_.size() ? networkAddresses_[static_cast<std::size_t>(rank)]
                                                                     : none;
  }
  // Whether the group connects to a rank only at the first message to or
  // from it (ConnectWhen::OnFirstMessage); then it tells only the ranks
  // that may wait for it when it fails or leaves (engine/notices.cpp).
  bool connectsLazily() const { return connectsLazily_; }
  // 26 bits of a hash of the name (tag::kReachedNotice's value).
  uint32_t nameValue() const { return nameValue_; }
  // Driver thread: a notice this rank is about to send its peers
  // (Operation::tellGroup), kept where the group connects lazily, for ranks
  // that connect later. False where one of the same purpose from the same
  // sender was kept before: a peer needs only one (it looks for a failure
  // notice from a rank whatever its value, and a rank leaves once), and a
  // group that fails every later collective at once would otherwise keep
  // one per call.
  bool rememberNotice(uint32_t purpose, uint32_t value, uint32_t sender) {
    if (!connectsLazily_) {
      return true;
    }
    if (std::any_of(notices_.begin(), notices_.end(),
                    [&](const Notice& kept) { return kept.purpose == purpose && kept.sender == sender; })) {
      return false;
    }
    notices_.push_back({purpose, value, sender});
    return true;
  }
  // Whether group rank r died, became unreachable or left (driver thread).
  bool rankGone(int rank) const {
    return !deadRanks_.empty() && std::binary_search(deadRanks_.begin(), deadRanks_.end(), rank);
  }

 private:
  friend class Engine;

  std::string name_;
  int rank_;
  int size_;
  uint32_t channel_;
  std::vector<PeerHandle> peers_;
  PeerAddresses addresses_;  // for connecting on first use
  std::function<std::string(const std::vector<int>&)> describeUnreachable_;
  std::vector<uint32_t> peerChannels_;
  std::vector<ProcessIdentity> processes_;  // indexed by group rank
  bool ranksOutnumberCores_ = false;
  std::vector<bool> onOtherHost_;  // indexed by group rank; empty: all on this host
  std::vector<std::string> hostNames_;
  std::vector<std::vector<std::string>> networkAddresses_;
  HostTopology topology_;
  tag::CollectiveLayout layout_;
  std::atomic<uint64_t> issued_{0};

  mutable std::mutex failureMutex_;
  std::string failure_;
  std::atomic<bool> failed_{false};
  std::function<void(const std::string&)> failureListener_;  // guarded by failureMutex_

  // Driver-only: collectives start one at a time, in issue order.
  std::deque<Operation*> waiting_;
  Operation* running_ = nullptr;
  uint64_t completedCollectives_ = 0;  // succeeded, i.e. #0 .. #completed-1 (they run in order)
  // Ended, succeeded or failed, except by an abort: all this rank will ever
  // send for #0 .. #finished-1 has been sent (what its leave notice says).
  uint64_t finishedCollectives_ = 0;
  std::unordered_set<Operation*> transfers_;  // point-to-point in flight
  bool closed_ = false;
  // Lazily connecting groups (engine/notices.cpp), driver-only: the
  // notices sent so far, in order, and the ranks known to have connected
  // to this one (tag::kReachedNotice), indexed by group rank.
  struct Notice {
    uint32_t purpose;
    uint32_t value;
    uint32_t sender;
  };
  bool connectsLazily_ = false;
  uint32_t nameValue_;
  std::vector<Notice> notices_;
  std::vector<bool> reachedBy_;
  std::vector<int> deadRanks_;  // ascending (died, unreachable or left); the group fails once non-empty
};

}  // namespace ucxcoll
