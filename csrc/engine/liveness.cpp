// Liveness of peers on other hosts. A peer process that dies on this host
// is seen at once (peer_watch), and one on another host that dies is
// reported by its host's kernel closing the connection. A host that goes
// down, or a link that is cut, says nothing: TCP keeps retransmitting for
// many minutes, and operations would wait for their deadline (10-30
// minutes with torch's defaults).
//
// So an operation that has waited UCXCOLL_PEER_LIVENESS_MS asks its
// group's ranks on other hosts whether they are there (a status query,
// status_query.hpp: a live rank answers within kIdleServicePeriod even
// while it is busy in Python). Those that do not answer within the same
// time are unreachable: the group fails, and every operation of it raises
// naming them. Every survivor asks for itself, so it does not matter which
// survivor notices first. With the default 2 s a lost host is named within
// about 4 s, whatever the group's timeout; waits shorter than the setting,
// and groups with no rank on another host, cost nothing.
//
// The question and its answer travel over the connection that carries the
// data, so on a slow link they can wait behind a large collective's bytes
// for longer than the answer is allowed (a 64 MiB all_gather across a 400
// Mbit/s link named live ranks unreachable). A rank that does not answer
// is therefore named only if the TCP connections to its host also moved
// no byte while it was asked (Transport::bytesMovedByPeerAddress): a link that
// moves bytes is not cut, and the host behind it is up; it is asked again.
// Where no TCP connection leads to its host (RDMA lanes), silence decides.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/logging.hpp"
#include "engine/engine.hpp"
#include "engine/group.hpp"
#include "engine/status_query.hpp"

namespace ucxcoll {
namespace {

constexpr auto kLivenessScanPeriod = std::chrono::milliseconds(100);

// The bytes exchanged over TCP with each of `peers`' addresses, summed per
// peer (-1 where no TCP connection leads to any of them).
std::vector<int64_t> tcpBytesExchanged(const Transport& transport, const Group& group, const std::vector<int>& peers) {
  const std::map<std::string, uint64_t> byAddress = transport.bytesMovedByPeerAddress();
  std::vector<int64_t> bytes;
  for (int peer : peers) {
    int64_t sum = -1;
    for (const std::string& address : group.networkAddresses(peer)) {
      if (auto found = byAddress.find(address); found != byAddress.end()) {
        sum = std::max<int64_t>(sum, 0) + static_cast<int64_t>(found->second);
      }
    }
    bytes.push_back(sum);
  }
  return bytes;
}

}  // namespace

void Engine::checkLiveness(Clock::time_point now) {
  if (now < nextLivenessScan_) {
    return;
  }
  nextLivenessScan_ = now + kLivenessScanPeriod;
  const auto interval = std::chrono::milliseconds(config().peerLivenessMilliseconds);
  // Operations that wait: running collectives, and point-to-point transfers.
  std::vector<Operation*> waiting;
  for (Operation* op : runningCollectives_) {
    waiting.push_back(op);
  }
  for (const auto& weak : groups_) {
    if (auto group = weak.lock()) {
      waiting.insert(waiting.end(), group->transfers_.begin(), group->transfers_.end());
    }
  }
  for (Operation* op : waiting) {
    Group* group = op->group();
    if (group == nullptr || op->failure_ || op->completed_ || op->outstanding_ == 0 || group->failed()) {
      continue;
    }
    if (op->livenessCheckAt_ == Clock::time_point{}) {
      op->livenessCheckAt_ = now + interval;
      continue;
    }
    if (op->livenessQueryOut_ || now < op->livenessCheckAt_) {
      continue;
    }
    std::vector<int> asked;
    for (int peer = 0; peer < group->size(); ++peer) {
      if (peer != group->rank() && group->onOtherHost(peer)) {
        asked.push_back(peer);
      }
    }
    if (asked.empty()) {
      op->livenessCheckAt_ = Clock::time_point::max();  // nobody to ask, ever
      continue;
    }
    op->livenessQueryOut_ = true;
    op->livenessCheckAt_ = now + interval;  // the next question, if this one is answered
    auto answers = std::make_shared<Answers>(asked.size());
    const uint32_t id = nextStatusQuery_++ & tag::kMaxInternalValue;
    auto query = std::make_unique<StatusQuery>(op->group_, id, asked, answers, interval);
    std::vector<int64_t> movedBefore = tcpBytesExchanged(*transport_, *group, asked);
    query->onComplete = [this, serial = op->serial_, weakGroup = std::weak_ptr<Group>(op->group_),
                         movedBefore = std::move(movedBefore), asked = std::move(asked), answers,
                         interval](std::exception_ptr) {
      auto found = inFlight_.find(serial);
      if (found != inFlight_.end()) {
        found->second->livenessQueryOut_ = false;
      }
      auto group = weakGroup.lock();
      if (!group || group->failed() || group->closed_) {
        return;
      }
      std::vector<int> silent;
      std::vector<int64_t> movedNow;
      for (std::size_t i = 0; i < asked.size(); ++i) {
        if ((*answers)[i][0] != '\0') {
          continue;
        }
        if (movedNow.empty()) {
          movedNow = tcpBytesExchanged(*transport_, *group, asked);
        }
        if (movedBefore[i] >= 0 && movedNow[i] > movedBefore[i]) {
          UCXCOLL_DEBUG("rank " << asked[i] << " of group \"" << group->name() << "\" did not answer within "
                                << interval.count() << " ms, but the connections to its host moved "
                                << movedNow[i] - movedBefore[i] << " bytes meanwhile: asking again");
          continue;
        }
        silent.push_back(asked[i]);
      }
      if (silent.empty()) {
        return;
      }
      const std::string seconds = std::to_string(interval.count()) + " ms";
      const char* fate = silent.size() == 1 ? "is unreachable" : "are unreachable";
      failGroupPeers(*group, std::move(silent),
                     "(on another host, no answer within " + seconds + " when asked after " + seconds +
                         " of waiting: the host is down or the network link to it is cut; UCXCOLL_PEER_LIVENESS_MS "
                         "sets how long)",
                     fate);
    };
    [[maybe_unused]] Lease lease = submit(std::move(query));
  }
}

}  // namespace ucxcoll
