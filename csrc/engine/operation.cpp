#include "engine/operation.hpp"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "engine/engine.hpp"
#include "engine/group.hpp"

namespace ucxcoll {

void Request::transferDone(const TransferResult& result) {
  ended_ = true;
  result_ = result;
  owner_.requestEnded(*this);
}

bool Request::Awaiter::await_ready() const noexcept {
  return request.ended_ && !request.owner_.failure_;
}

void Request::Awaiter::await_suspend(std::coroutine_handle<> waiter) const noexcept {
  request.owner_.waiter_ = waiter;
  request.owner_.waitingFor_ = &request;
}

bool Operation::AllAwaiter::await_ready() const noexcept {
  return op.outstanding_ == 0 && !op.failure_;
}

void Operation::AllAwaiter::await_suspend(std::coroutine_handle<> waiter) noexcept {
  op.waiter_ = waiter;
  op.waitingFor_ = nullptr;
}

Operation::Operation(Kind kind, std::shared_ptr<Group> group, std::chrono::milliseconds timeout)
    : kind_(kind), group_(std::move(group)), timeout_(timeout) {}

const std::string& Operation::name() const {
  if (name_.empty()) {
    name_ = describe();
    if (group_) {
      name_ += " on group \"" + group_->name() + "\" (rank " + std::to_string(group_->rank()) + " of " +
               std::to_string(group_->size()) + ", timeout " + std::to_string(timeout_.count()) + " ms)";
    }
  }
  return name_;
}

Operation::~Operation() = default;

Request& Operation::sendTagged(int peer, uint64_t tag, const void* data, std::size_t bytes, SendMode mode) {
  Request& request = requests_.emplace_back(*this, peer, bytes, false);
  ++outstanding_;
  if (!refuseGonePeer(request)) {
    if (PeerHandle to = connection(peer)) {
      engine_->transport_->send(to, tag, data, bytes, mode, request);
    } else {
      refuseGonePeer(request);
    }
  }
  return request;
}

Request& Operation::recvTagged(int peer, uint64_t tag, uint64_t mask, void* data, std::size_t bytes) {
  return postReceive(requests_.emplace_back(*this, peer, bytes, true), tag, mask, data);
}

Request& Operation::recvUpTo(int peer, uint64_t tag, uint64_t mask, void* data, std::size_t bytes) {
  return postReceive(requests_.emplace_back(*this, peer, bytes, true, true), tag, mask, data);
}

// The flag that lets a receive take a shorter message is set before the
// receive is posted: one that matches a message already there ends inside
// the transport's recv().
Request& Operation::postReceive(Request& request, uint64_t tag, uint64_t mask, void* data) {
  ++outstanding_;
  if (!refuseGonePeer(request)) {
    const int peer = request.peer();
    PeerHandle from = peer >= 0 ? connection(peer) : nullptr;
    if (peer < 0 || from != nullptr) {
      engine_->transport_->recv(from, tag, mask, data, request.bytes(), request);
    } else {
      refuseGonePeer(request);
    }
  }
  return request;
}

Request& Operation::sendToProcess(PeerHandle to, int rank, uint64_t tag, const void* data, std::size_t bytes) {
  Request& request = requests_.emplace_back(*this, rank, bytes, false);
  ++outstanding_;
  engine_->transport_->send(to, tag, data, bytes, SendMode::Standard, request);
  return request;
}

PeerHandle Operation::connection(int peer) {
  PeerHandle handle = group_->peer(peer);
  if (handle != nullptr) {
    return handle;
  }
  // A group that connects lazily connects to a rank at the first message
  // to or from it: a receive too, so that the transport reports the
  // connection's failure while this rank waits for the peer. The peer
  // learns that this rank may wait for it, so that it tells this rank
  // when it fails or leaves (engine/notices.cpp).
  handle = engine_->reach(*group_, peer);
  if (handle != nullptr && peer != group_->rank() && group_->connectsLazily()) {
    sendToProcess(handle, -1,
                  tag::internal(group_->peerChannel(peer), tag::kReachedNotice, group_->nameValue(),
                                static_cast<uint32_t>(group_->rank())),
                  nullptr, 0);
  }
  return handle;
}

void Operation::tellGroup(uint32_t purpose, uint32_t value, uint32_t sender) {
  Group& group = *group_;
  if (!group.rememberNotice(purpose, value, sender)) {
    return;  // told before; ranks that connected since were answered then
  }
  for (int peer : engine_->ranksToTell(group)) {
    if (peer != static_cast<int>(sender)) {
      sendTagged(peer, tag::internal(group.peerChannel(peer), purpose, value, sender), nullptr, 0);
    }
  }
}

// A message to or from a rank the group lost (one that left keeps its
// connection a moment longer, and a send into it would vanish) fails the
// operation at once, with the group's account of the loss.
bool Operation::refuseGonePeer(Request& request) {
  if (request.peer() < 0 || !group_ || !group_->rankGone(request.peer())) {
    return false;
  }
  group_->notifyFailure();
  fail(std::make_exception_ptr(PeerGoneError(name() + " failed: " + group_->failure())));
  TransferResult refused;
  refused.status = TransferStatus::Canceled;
  request.transferDone(refused);
  return true;
}

void Operation::requestEnded(Request& request) {
  --outstanding_;
  const TransferResult& result = request.result();
  std::string peer = peerName(request);
  if (request.isReceive() && result.status == TransferStatus::Ok && result.length != request.bytes() &&
      !(request.takesShorter() && result.length < request.bytes())) {
    fail(std::make_exception_ptr(MismatchError(name() + ": " + peer + " sent " + std::to_string(result.length) +
                                               " bytes where " + std::to_string(request.bytes()) + " were expected" +
                                               mismatchHint())));
  } else if (result.status == TransferStatus::Truncated) {
    std::string size = result.length > request.bytes() ? std::to_string(result.length) + " bytes"
                                                       : "more than " + std::to_string(request.bytes()) + " bytes";
    fail(std::make_exception_ptr(MismatchError(name() + ": " + peer + " sent " + size + " where " +
                                               std::to_string(request.bytes()) + " were expected" + mismatchHint())));
  } else if (result.status == TransferStatus::PeerLost) {
    // Said as the engine says it when the endpoint's failure arrives first,
    // and a PeerGoneError: every survivor finds the dead peer by itself.
    const std::string ofGroup = group_ ? " of group \"" + group_->name() + "\"" : "";
    fail(std::make_exception_ptr(PeerGoneError(name() + " failed: " + peer + ofGroup +
                                               " died (the connection to its host broke: " + result.detail +
                                               "; its process or host is gone)")));
  } else if (result.status == TransferStatus::Failed) {
    fail(std::make_exception_ptr(Error(name() + ": " + (request.isReceive() ? "receive from " : "send to ") + peer +
                                       " failed: " + result.detail)));
  } else if (result.status == TransferStatus::Canceled && !failure_) {
    fail(std::make_exception_ptr(AbortedError(name() + ": a transfer with " + peer + " was canceled")));
  }
  if (failure_ || (started_ && !waiter_ && task_.valid() && task_.done())) {
    if (failure_ || outstanding_ == 0) {
      engine_->needsReview(*this);
    }
    return;
  }
  if (waiter_ && (waitingFor_ == &request || (waitingFor_ == nullptr && outstanding_ == 0))) {
    engine_->schedule(*this);
  }
}

std::vector<int> Operation::peersAwaited() const {
  // In the order of their first request. Linear in the requests: a small
  // all_reduce at n ranks waits on n - 1 peers, and the housekeeping asks
  // this of every waiting operation on each pass (a search of the list per
  // request made it quadratic: most of a 1,024-rank simulation's time).
  std::vector<int> peers;
  std::vector<bool> listed(group_ ? static_cast<std::size_t>(group_->size()) : 0);
  for (const auto& request : requests_) {
    const int peer = request.peer();
    if (request.ended() || peer < 0) {
      continue;
    }
    const auto index = static_cast<std::size_t>(peer);
    if (index >= listed.size()) {
      listed.resize(index + 1);
    }
    if (!listed[index]) {
      listed[index] = true;
      peers.push_back(peer);
    }
  }
  return peers;
}

Operation::LeftPeer Operation::leftPeerOf(const ProbedMessage& notice) {
  return LeftPeer{static_cast<int>(tag::sender(notice.senderTag)),
                  static_cast<LeaveReason>(tag::purposeOf(notice.senderTag) - tag::kLeftNotice),
                  tag::internalValue(notice.senderTag)};
}

std::vector<Operation::LeftPeer> Operation::leftPeersAwaited(Transport& transport) const {
  std::vector<LeftPeer> left;
  for (int peer : peersAwaited()) {
    if (auto notice =
            transport.probe(tag::internal(group_->channel(), tag::kLeftNotice, 0, static_cast<uint32_t>(peer)),
                            tag::kLeftNoticeFromSenderMask)) {
      left.push_back(leftPeerOf(*notice));
    }
  }
  return left;
}

std::optional<Operation::LeftPeer> Operation::anyLeftPeer(Transport& transport) const {
  if (auto notice = transport.probe(tag::internal(group_->channel(), tag::kLeftNotice, 0, 0), tag::kLeftNoticeMask)) {
    return leftPeerOf(*notice);
  }
  return std::nullopt;
}

std::string Operation::describeLeaving(const LeftPeer& left) const {
  return "rank " + std::to_string(left.rank) + " of group \"" + group_->name() + "\" " +
         ucxcoll::describeLeaving(left.how) + " after finishing " + std::to_string(left.finishedCollectives) +
         " of its collectives";
}

std::string Operation::auditLine(const std::exception_ptr& error) const {
  std::set<int> peers;
  for (const auto& request : requests_) {
    if (request.peer() >= 0) {
      peers.insert(request.peer());
    }
  }
  std::ostringstream line;
  line << "audit: " << name() << ": " << payloadBytes << " B, ";
  if (const char* how = algorithm()) {
    line << how << " algorithm, ";
  }
  if (peers.empty()) {
    line << "no messages";
  } else {
    line << "peers";
    for (int peer : peers) {
      line << (peer == *peers.begin() ? " " : ",") << peer;
    }
  }
  line << ", " << std::fixed << std::setprecision(3)
       << std::chrono::duration<double, std::milli>(Clock::now() - submittedAt_).count() << " ms, ";
  if (!error) {
    line << "ok";
  } else {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& failure) {
      // Errors usually start with the name again.
      std::string_view why = failure.what();
      for (const std::string& repeated : {name() + " failed: ", name() + ": "}) {
        if (why.starts_with(repeated)) {
          why.remove_prefix(repeated.size());
          break;
        }
      }
      line << "failed: " << why;
    } catch (...) {
      line << "failed";
    }
  }
  return line.str();
}

std::string Operation::peerName(const Request& request) const {
  return request.peer() >= 0 ? "rank " + std::to_string(request.peer()) : "a rank";
}

void Operation::fail(std::exception_ptr error) {
  if (!failure_) {
    failure_ = std::move(error);
    if (engine_ != nullptr) {
      engine_->needsReview(*this);
    }
  }
}

std::vector<int> Operation::silentPeers() const {
  std::vector<int> peers;
  for (const auto& request : requests_) {
    if (!request.ended() && request.isReceive() && request.peer() >= 0 &&
        std::find(peers.begin(), peers.end(), request.peer()) == peers.end()) {
      peers.push_back(request.peer());
    }
  }
  std::sort(peers.begin(), peers.end());
  return peers;
}

std::string Operation::listRanks(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return text;
}

std::string Operation::describeMissingPeers() const {
  const std::vector<int> receives = silentPeers();
  std::vector<int> sends;
  bool anySource = false;
  for (const auto& request : requests_) {
    if (request.ended()) {
      continue;
    }
    if (request.peer() < 0) {
      anySource = true;
    } else if (!request.isReceive() && std::find(sends.begin(), sends.end(), request.peer()) == sends.end()) {
      sends.push_back(request.peer());
    }
  }
  std::ostringstream out;
  if (!receives.empty()) {
    out << "no data from rank(s) [" << listRanks(receives) << "]";
  }
  if (anySource) {
    out << (out.tellp() > 0 ? "; " : "") << "no message from any rank";
  }
  if (!sends.empty()) {
    out << (out.tellp() > 0 ? "; " : "") << "rank(s) [" << listRanks(sends) << "] did not take our data";
  }
  if (out.tellp() == 0) {
    out << "it was still waiting for its turn behind earlier operations";
  }
  return out.str();
}

}  // namespace ucxcoll
