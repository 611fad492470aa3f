#include "transport/loopback_transport.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace ucxcoll {
namespace {

bool matches(uint64_t tag, uint64_t wanted, uint64_t mask) {
  return (tag & mask) == (wanted & mask);
}

}  // namespace

std::unique_ptr<LoopbackTransport> LoopbackFabric::attach() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto index = static_cast<uint32_t>(members_.size());
  auto transport = std::make_unique<LoopbackTransport>(*this, index);
  members_.push_back(transport.get());
  return transport;
}

void LoopbackFabric::deliver(uint32_t index, Message message) {
  std::lock_guard<std::mutex> lock(mutex_);
  LoopbackTransport* target = members_.at(index);
  if (target == nullptr) {
    return;  // that process is gone; so is the message
  }
  {
    std::lock_guard<std::mutex> inbox(target->inboxMutex_);
    target->inbox_.push_back(std::move(message));
  }
  target->inboxReady_.notify_all();
}

void LoopbackFabric::acknowledge(uint32_t index, Acknowledgement ack) {
  std::lock_guard<std::mutex> lock(mutex_);
  LoopbackTransport* target = members_.at(index);
  if (target == nullptr) {
    return;
  }
  {
    std::lock_guard<std::mutex> inbox(target->inboxMutex_);
    target->acks_.push_back(std::move(ack));
  }
  target->inboxReady_.notify_all();
}

void LoopbackFabric::detach(uint32_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  members_.at(index) = nullptr;
}

LoopbackTransport::LoopbackTransport(LoopbackFabric& fabric, uint32_t index)
    : fabric_(fabric), index_(index), random_(fabric.options().seed * 0x9e3779b97f4a7c15ull + index) {
  address_.resize(sizeof(index_));
  std::memcpy(address_.data(), &index_, sizeof(index_));
}

LoopbackTransport::~LoopbackTransport() {
  fabric_.detach(index_);
}

PeerHandle LoopbackTransport::connect(const std::vector<uint8_t>& address, PeerLocation /*location*/) {
  if (address.size() != sizeof(uint32_t)) {
    throw std::invalid_argument("loopback: bad address");
  }
  uint32_t index = 0;
  std::memcpy(&index, address.data(), sizeof(index));
  // The handle is the fabric index itself (not a pointer): peers may go away.
  return reinterpret_cast<PeerHandle>(static_cast<uintptr_t>(index) + 1);
}

void LoopbackTransport::send(PeerHandle peer, uint64_t tag, const void* data, std::size_t bytes, SendMode mode,
                             Transfer& transfer) {
  auto target = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(peer) - 1);
  messagesSent_.fetch_add(1, std::memory_order_relaxed);
  Message message{tag, std::vector<std::byte>(bytes), index_, nullptr};
  if (bytes > 0) {
    std::memcpy(message.data.data(), data, bytes);
  }
  const bool waitForReceiver = mode == SendMode::Synchronous || bytes > fabric_.options().eagerBytes;
  if (waitForReceiver) {
    transfer.inFlight = true;
    message.sendTransfer = &transfer;
  }
  fabric_.deliver(target, std::move(message));
  if (!waitForReceiver) {
    complete(transfer, TransferResult{});
  }
}

void LoopbackTransport::recv(PeerHandle /*from*/, uint64_t tag, uint64_t mask, void* data, std::size_t bytes,
                             Transfer& transfer) {
  if (recvWaiting(tag, mask, data, bytes, transfer)) {
    return;
  }
  transfer.inFlight = true;
  posted_.push_back(PostedReceive{tag, mask, data, bytes, &transfer});
  transfer.native = &posted_.back();
}

bool LoopbackTransport::recvWaiting(uint64_t tag, uint64_t mask, void* data, std::size_t bytes, Transfer& transfer) {
  auto found = std::find_if(unexpected_.begin(), unexpected_.end(),
                            [&](const Message& message) { return matches(message.tag, tag, mask); });
  if (found == unexpected_.end()) {
    return false;
  }
  // Matched at once; like UCX with NO_IMM_CMPL the end is reported later,
  // from progress().
  transfer.inFlight = true;
  PostedReceive receive{tag, mask, data, bytes, &transfer};
  Message message = std::move(*found);
  unexpected_.erase(found);
  match(receive, message);
  return true;
}

void LoopbackTransport::cancel(Transfer& transfer) {
  auto found = std::find_if(posted_.begin(), posted_.end(),
                            [&](const PostedReceive& receive) { return receive.transfer == &transfer; });
  if (found == posted_.end()) {
    return;  // a send, or already matched
  }
  posted_.erase(found);
  TransferResult canceled;
  canceled.status = TransferStatus::Canceled;
  completions_.push_back({&transfer, canceled});
}

std::optional<ProbedMessage> LoopbackTransport::probe(uint64_t tag, uint64_t mask) {
  for (const auto& message : unexpected_) {
    if (matches(message.tag, tag, mask)) {
      return ProbedMessage{message.tag, message.data.size()};
    }
  }
  return std::nullopt;
}

std::size_t LoopbackTransport::discard(uint64_t tag, uint64_t mask) {
  std::size_t dropped = 0;
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    if (!matches(it->tag, tag, mask)) {
      ++it;
      continue;
    }
    if (it->sendTransfer != nullptr) {
      fabric_.acknowledge(it->sender, {it->sendTransfer, TransferResult{}});
    }
    it = unexpected_.erase(it);
    ++dropped;
  }
  return dropped;
}

void LoopbackTransport::match(PostedReceive& receive, Message& message) {
  TransferResult result;
  result.length = message.data.size();
  result.senderTag = message.tag;
  std::size_t copied = std::min(receive.bytes, message.data.size());
  if (copied > 0) {
    std::memcpy(receive.data, message.data.data(), copied);
  }
  if (message.data.size() > receive.bytes) {
    result.status = TransferStatus::Truncated;
  }
  completions_.push_back({receive.transfer, result});
  if (message.sendTransfer != nullptr) {
    fabric_.acknowledge(message.sender, {message.sendTransfer, TransferResult{}});
  }
}

void LoopbackTransport::complete(Transfer& transfer, TransferResult result) {
  transfer.inFlight = false;
  transfer.native = nullptr;
  transfer.transferDone(result);
}

unsigned LoopbackTransport::progress() {
  std::vector<Message> arrived;
  std::vector<LoopbackFabric::Acknowledgement> acks;
  {
    std::lock_guard<std::mutex> lock(inboxMutex_);
    arrived.swap(inbox_);
    acks.swap(acks_);
  }
  const LoopbackOptions& options = fabric_.options();
  for (auto& message : arrived) {
    message.delay = options.maxDelay == 0 ? 0 : static_cast<uint32_t>(random_() % (options.maxDelay + 1));
    held_[message.sender].push_back(std::move(message));
  }
  // At most one message per sender becomes visible per call, so that
  // shuffling them can never reorder two messages of one sender.
  std::vector<Message> released;
  for (auto it = held_.begin(); it != held_.end();) {
    auto& queue = it->second;
    if (queue.front().delay == 0) {
      released.push_back(std::move(queue.front()));
      queue.pop_front();
    } else {
      --queue.front().delay;
    }
    it = queue.empty() ? held_.erase(it) : std::next(it);
  }
  if (options.reorder) {
    std::shuffle(released.begin(), released.end(), random_);
  }
  unsigned events = static_cast<unsigned>(acks.size() + released.size());
  for (auto& message : released) {
    auto found = std::find_if(posted_.begin(), posted_.end(), [&](const PostedReceive& receive) {
      return matches(message.tag, receive.tag, receive.mask);
    });
    if (found == posted_.end()) {
      unexpected_.push_back(std::move(message));
      continue;
    }
    PostedReceive receive = *found;
    posted_.erase(found);
    match(receive, message);
  }
  for (auto& ack : acks) {
    complete(*ack.transfer, ack.result);
  }
  // Handlers may post or cancel, which adds to completions_.
  while (!completions_.empty()) {
    std::vector<LoopbackFabric::Acknowledgement> ready;
    ready.swap(completions_);
    events += static_cast<unsigned>(ready.size());
    for (auto& completion : ready) {
      complete(*completion.transfer, completion.result);
    }
  }
  return events;
}

void LoopbackTransport::waitForActivity(int timeoutMs) {
  if (!held_.empty() || !completions_.empty()) {
    return;  // delayed messages need progress() calls, not sleep
  }
  std::unique_lock<std::mutex> lock(inboxMutex_);
  inboxReady_.wait_for(lock, std::chrono::milliseconds(timeoutMs),
                       [&] { return !inbox_.empty() || !acks_.empty() || interrupted_; });
  interrupted_ = false;
}

void LoopbackTransport::interrupt() {
  {
    std::lock_guard<std::mutex> lock(inboxMutex_);
    interrupted_ = true;
  }
  inboxReady_.notify_all();
}

}  // namespace ucxcoll
