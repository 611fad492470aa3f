#include "transport/shared_memory_transport.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/logging.hpp"
#include "common/process_id.hpp"

namespace ucxcoll {

// What a process's address says about its inbox, ahead of the network
// transport's own address.
struct SharedMemoryTransport::Identity {
  uint64_t magic = 0;
  SegmentOffer inbox;   // host 0: no inbox (lanes turned off, or not possible)
  int32_t wakeFd = -1;  // the write end of the owner's wake-up pipe
  uint32_t serial = 0;  // tells apart the transports of one process (tests)
};

namespace {

constexpr uint64_t kAddressMagic = 0x316d6873'63786375ull;  // "ucxcshm1"
constexpr std::size_t kRings = 128;
constexpr std::size_t kRingBytes = std::size_t{256} << 10;

enum RecordKind : uint32_t {
  kData = 1,
  kSyncData = 2,  // the sender waits for an Ack
  kNote = 3,
  kAck = 4,
  kWrap = 5,  // the rest of the ring is unused: go on at its start
};

struct RecordHeader {
  uint32_t kind;
  uint32_t unused;
  uint64_t bytes;  // the message's size (Data: also the payload's)
  uint64_t tag;    // job key applied
  uint64_t id;     // SyncData and Ack: the acknowledgement's number
};
constexpr std::size_t kHeaderBytes = sizeof(RecordHeader);
static_assert(kHeaderBytes == 32);

constexpr std::size_t recordBytes(std::size_t payload) {
  return (kHeaderBytes + payload + 7) & ~std::size_t{7};
}
static_assert(recordBytes(kInlineBytes) <= kRingBytes / 2, "a record must fit the ring twice over");

struct alignas(64) InboxHeader {
  uint64_t magic;
  uint32_t claimed;   // rings handed out so far (atomic)
  uint32_t sleeping;  // the owner is (about to be) asleep (atomic)
};

}  // namespace

// One ring's control block in an inbox; the cursors are byte counts that
// only grow (position = cursor % kRingBytes).
struct SharedMemoryTransport::Ring {
  alignas(64) uint64_t head;   // written by the writer: published up to here
  alignas(64) uint64_t tail;   // written by the reader: consumed up to here
  alignas(64) uint32_t ready;  // the writer has filled in `writer`
  Identity writer;
};

namespace {

constexpr std::size_t kRingsOffset = 64;
constexpr std::size_t kDataOffset =
    (kRingsOffset + kRings * sizeof(SharedMemoryTransport::Ring) + 4095) & ~std::size_t{4095};
constexpr std::size_t kInboxBytes = kDataOffset + kRings * kRingBytes;

template <typename T>
std::atomic_ref<T> shared(T& value) {
  return std::atomic_ref<T>(value);
}

InboxHeader& headerOf(std::byte* inbox) {
  return *reinterpret_cast<InboxHeader*>(inbox);
}
SharedMemoryTransport::Ring& ringOf(std::byte* inbox, std::size_t index) {
  return reinterpret_cast<SharedMemoryTransport::Ring*>(inbox + kRingsOffset)[index];
}
std::byte* ringData(std::byte* inbox, std::size_t index) {
  return inbox + kDataOffset + index * kRingBytes;
}

// The transports of this process by serial, so that a writer can wake a
// reader in this same process without a pipe.
std::mutex registryMutex;
std::map<uint32_t, Transport*> registry;
std::atomic<uint32_t> nextSerial{1};

bool matches(uint64_t tag, uint64_t wanted, uint64_t mask) {
  return ((tag ^ wanted) & mask) == 0;
}

}  // namespace

struct SharedMemoryTransport::Peer {
  Identity identity;
  PeerHandle network = nullptr;
  bool lane = false;  // messages to and from it go through the rings
  bool gone = false;  // peerGone()

  // Writing to it: this process's ring in its inbox.
  std::unique_ptr<Mapping> inbox;
  Ring* out = nullptr;
  std::byte* outData = nullptr;
  uint64_t head = 0;
  uint64_t tailSeen = 0;
  FileDescriptor wakeFd;
  struct Queued {
    uint32_t kind;
    uint64_t tag;
    uint64_t id;
    const void* data;
    std::size_t bytes;
    Transfer* transfer;  // Data, SyncData; null once canceled
  };
  std::deque<Queued> queued;  // records waiting for room in the ring
  std::map<uint64_t, Transfer*> awaitingAck;

  // Reading from it.
  std::list<Posted> posted;     // receives for its messages, in posting order
  std::deque<Arrived> arrived;  // its messages nobody received yet
};

SharedMemoryTransport::SharedMemoryTransport(std::unique_ptr<Transport> network) : network_(std::move(network)) {
  serial_ = nextSerial.fetch_add(1);
  Identity identity;
  identity.magic = kAddressMagic;
  identity.serial = serial_;
  if (config().sharedMemory) {
    inbox_ = OwnedSegment::create("ucxcoll-inbox", kInboxBytes);
  }
  if (inbox_) {
    headerOf(inbox_->data()).magic = kAddressMagic;
    incoming_.assign(kRings, nullptr);
    readUpTo_.assign(kRings, 0);
    int ends[2];
    if (::pipe2(ends, O_NONBLOCK | O_CLOEXEC) == 0) {
      wakeRead_ = FileDescriptor(ends[0]);
      wakeWrite_ = FileDescriptor(ends[1]);
      wakeThroughPipe_ = network_->watchWakeupFd(wakeRead_.get());
    }
    identity.inbox = inbox_->offer();
    identity.wakeFd = wakeThroughPipe_ ? wakeWrite_.get() : -1;
  }
  {
    std::lock_guard lock(registryMutex);
    registry[serial_] = network_.get();
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(&identity);
  address_.assign(bytes, bytes + sizeof(identity));
  address_.insert(address_.end(), network_->address().begin(), network_->address().end());
}

SharedMemoryTransport::~SharedMemoryTransport() {
  std::lock_guard lock(registryMutex);
  registry.erase(serial_);
}

SharedMemoryTransport::Peer& SharedMemoryTransport::peerByIdentity(const Identity& identity) {
  auto key = std::tuple(identity.inbox.pid, identity.serial, identity.inbox.inode);
  if (auto found = byIdentity_.find(key); found != byIdentity_.end()) {
    return *found->second;
  }
  Peer& peer = peers_.emplace_back();
  peer.identity = identity;
  peer.lane = true;
  byIdentity_.emplace(key, &peer);
  return peer;
}

PeerHandle SharedMemoryTransport::connect(const std::vector<uint8_t>& address, PeerLocation location) {
  if (auto found = byAddress_.find(address); found != byAddress_.end()) {
    return found->second;
  }
  Identity identity;
  if (address.size() < sizeof(identity)) {
    throw Error("connect: a peer's address is too short to be a ucxcoll address (" + std::to_string(address.size()) +
                " bytes)");
  }
  std::memcpy(&identity, address.data(), sizeof(identity));
  if (identity.magic != kAddressMagic) {
    throw Error("connect: a peer's address is not a ucxcoll address of this version");
  }
  std::vector<uint8_t> networkAddress(address.begin() + sizeof(identity), address.end());
  PeerHandle network = network_->connect(networkAddress, location);
  const bool lane = location == PeerLocation::ThisHost && inbox_ && identity.inbox.host != 0 &&
                    identity.inbox.host == inbox_->offer().host;
  Peer* peer = nullptr;
  if (lane) {
    peer = &peerByIdentity(identity);
    openLane(*peer);
  } else {
    peer = &peers_.emplace_back();
    peer->identity = identity;
  }
  peer->network = network;
  byNetworkHandle_[network] = peer;
  byAddress_.emplace(address, peer);
  return peer;
}

bool SharedMemoryTransport::hasLeft(const std::vector<uint8_t>& address) const {
  Identity identity;
  if (address.size() < sizeof(identity)) {
    return false;
  }
  std::memcpy(&identity, address.data(), sizeof(identity));
  // A process closes its inbox only when its engine goes away.
  return identity.magic == kAddressMagic && offerWithdrawn(identity.inbox);
}

void SharedMemoryTransport::openLane(Peer& peer) {
  if (peer.out != nullptr) {
    return;
  }
  const Identity& identity = peer.identity;
  const char* why = nullptr;
  auto inbox = mapOfferedSegment(identity.inbox, kInboxBytes, true, &why);
  auto refuse = [&](const std::string& reason) {
    throw Error("cannot reach the process " + std::to_string(identity.inbox.pid) +
                " on this host through shared memory: " + reason +
                "; UCXCOLL_SHARED_MEMORY=0 makes every process use UCX alone");
  };
  if (!inbox || headerOf(inbox->data()).magic != kAddressMagic) {
    refuse(std::string("its inbox cannot be mapped (") + (why != nullptr ? why : "no inbox there") + ")");
  }
  if (identity.inbox.pid != currentProcessId()) {
    if (identity.wakeFd < 0) {
      refuse("it offers no way to wake it");
    }
    // Read-write, so that the pipe always has a reader (this end): a write
    // to a pipe whose reader died would raise SIGPIPE.
    const std::string path = "/proc/" + std::to_string(identity.inbox.pid) + "/fd/" + std::to_string(identity.wakeFd);
    FileDescriptor wakeFd(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (wakeFd.get() < 0) {
      refuse("its wake-up pipe " + path + " cannot be opened (" + std::strerror(errno) + ")");
    }
    peer.wakeFd = std::move(wakeFd);
  }
  const uint32_t index = shared(headerOf(inbox->data()).claimed).fetch_add(1);
  if (index >= kRings) {
    refuse("its inbox has no free ring left (" + std::to_string(kRings) + " writers)");
  }
  Ring& ring = ringOf(inbox->data(), index);
  std::memcpy(&ring.writer, address_.data(), sizeof(Identity));
  shared(ring.ready).store(1, std::memory_order_release);
  peer.out = &ring;
  peer.outData = ringData(inbox->data(), index);
  peer.inbox = std::move(inbox);
}

bool SharedMemoryTransport::sharesMemoryWith(PeerHandle peer) const {
  return static_cast<const Peer*>(peer)->lane;
}

// ---- Writing ---------------------------------------------------------------

bool SharedMemoryTransport::write(Peer& peer, uint32_t kind, uint64_t tag, uint64_t id, const void* data,
                                  std::size_t bytes) {
  const std::size_t payload = (kind == kData || kind == kSyncData) ? bytes : 0;
  const std::size_t need = recordBytes(payload);
  std::size_t offset = peer.head % kRingBytes;
  const std::size_t skip = kRingBytes - offset < need ? kRingBytes - offset : 0;
  if (peer.head + skip + need - peer.tailSeen > kRingBytes) {
    peer.tailSeen = shared(peer.out->tail).load(std::memory_order_acquire);
    if (peer.head + skip + need - peer.tailSeen > kRingBytes) {
      return false;
    }
  }
  if (skip != 0) {
    if (skip >= kHeaderBytes) {
      RecordHeader wrap{kWrap, 0, 0, 0, 0};
      std::memcpy(peer.outData + offset, &wrap, sizeof(wrap));
    }
    peer.head += skip;
    offset = 0;
  }
  RecordHeader header{kind, 0, bytes, tag, id};
  std::memcpy(peer.outData + offset, &header, sizeof(header));
  if (payload != 0) {
    std::memcpy(peer.outData + offset + kHeaderBytes, data, payload);
  }
  peer.head += need;
  shared(peer.out->head).store(peer.head, std::memory_order_release);
  // Pairs with the fence in waitForActivity: either the reader sees the new
  // head before it sleeps, or this writer sees its flag and wakes it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto sleeping = shared(headerOf(peer.inbox->data()).sleeping);
  if (sleeping.load(std::memory_order_relaxed) != 0 && sleeping.exchange(0) != 0) {
    wake(peer);
  }
  return true;
}

void SharedMemoryTransport::wake(Peer& peer) {
  if (peer.wakeFd.get() >= 0) {
    const char byte = 1;
    [[maybe_unused]] auto written = ::write(peer.wakeFd.get(), &byte, 1);  // a full pipe wakes it already
    return;
  }
  std::lock_guard lock(registryMutex);
  if (auto found = registry.find(peer.identity.serial); found != registry.end()) {
    found->second->interrupt();
  }
}

void SharedMemoryTransport::post(Peer& peer, uint32_t kind, uint64_t tag, uint64_t id, const void* data,
                                 std::size_t bytes, Transfer* transfer) {
  if (peer.queued.empty() && write(peer, kind, tag, id, data, bytes)) {
    if (kind == kData) {
      endWith(*transfer, TransferStatus::Ok);
    } else if (kind == kSyncData) {
      peer.awaitingAck.emplace(id, transfer);
    }
    return;
  }
  peer.queued.push_back(Peer::Queued{kind, tag, id, data, bytes, transfer});
  ++queuedRecords_;
}

unsigned SharedMemoryTransport::flushQueued() {
  unsigned written = 0;
  for (Peer& peer : peers_) {
    while (!peer.queued.empty()) {
      Peer::Queued& next = peer.queued.front();
      const bool canceled = (next.kind == kData || next.kind == kSyncData) && next.transfer == nullptr;
      if (!canceled && !write(peer, next.kind, next.tag, next.id, next.data, next.bytes)) {
        break;
      }
      Peer::Queued done = next;
      peer.queued.pop_front();
      --queuedRecords_;
      ++written;
      if (!canceled && done.kind == kData) {
        endWith(*done.transfer, TransferStatus::Ok);
      } else if (!canceled && done.kind == kSyncData) {
        peer.awaitingAck.emplace(done.id, done.transfer);
      }
    }
  }
  return written;
}

void SharedMemoryTransport::send(PeerHandle handle, uint64_t tag, const void* data, std::size_t bytes, SendMode mode,
                                 Transfer& transfer) {
  Peer& peer = *static_cast<Peer*>(handle);
  if (!peer.lane) {
    transfer.carrier = network_.get();
    network_->send(peer.network, tag, data, bytes, mode, transfer);
    return;
  }
  if (peer.gone) {
    transfer.carrier = this;
    endWith(transfer, TransferStatus::PeerLost, 0, 0, "the peer's process is gone");
    return;
  }
  if (bytes > kInlineBytes) {
    // The payload keeps UCX's rendezvous; the note keeps its place in line.
    post(peer, kNote, tag ^ jobKey_, 0, nullptr, bytes, nullptr);
    transfer.carrier = network_.get();
    network_->send(peer.network, tag, data, bytes, mode, transfer);
    return;
  }
  transfer.inFlight = true;
  transfer.carrier = this;
  if (mode == SendMode::Synchronous) {
    post(peer, kSyncData, tag ^ jobKey_, nextAckId_++, data, bytes, &transfer);
  } else {
    post(peer, kData, tag ^ jobKey_, 0, data, bytes, &transfer);
  }
}

// ---- Reading ---------------------------------------------------------------

unsigned SharedMemoryTransport::pollRings() {
  if (!inbox_) {
    return 0;
  }
  std::byte* inbox = inbox_->data();
  const std::size_t claimed =
      std::min<std::size_t>(shared(headerOf(inbox).claimed).load(std::memory_order_acquire), kRings);
  unsigned records = 0;
  for (std::size_t index = 0; index < claimed; ++index) {
    Ring& ring = ringOf(inbox, index);
    if (incoming_[index] == nullptr) {
      if (shared(ring.ready).load(std::memory_order_acquire) == 0) {
        continue;
      }
      incoming_[index] = &peerByIdentity(ring.writer);
    }
    const uint64_t head = shared(ring.head).load(std::memory_order_acquire);
    uint64_t tail = readUpTo_[index];
    if (head == tail) {
      continue;
    }
    const std::byte* data = ringData(inbox, index);
    while (tail != head) {
      const std::size_t offset = tail % kRingBytes;
      if (kRingBytes - offset < kHeaderBytes) {
        tail += kRingBytes - offset;
        continue;
      }
      RecordHeader header;
      std::memcpy(&header, data + offset, sizeof(header));
      if (header.kind == kWrap) {
        tail += kRingBytes - offset;
        continue;
      }
      const std::size_t payload = (header.kind == kData || header.kind == kSyncData) ? header.bytes : 0;
      handleRecord(*incoming_[index], header.kind, header.tag, header.id, data + offset + kHeaderBytes, header.bytes);
      tail += recordBytes(payload);
      ++records;
    }
    readUpTo_[index] = tail;
    shared(ring.tail).store(tail, std::memory_order_release);
  }
  return records;
}

void SharedMemoryTransport::handleRecord(Peer& from, uint32_t kind, uint64_t tag, uint64_t id, const std::byte* payload,
                                         std::size_t bytes) {
  if (kind == kAck) {
    if (auto found = from.awaitingAck.find(id); found != from.awaitingAck.end()) {
      Transfer* transfer = found->second;
      from.awaitingAck.erase(found);
      endWith(*transfer, TransferStatus::Ok);
    }
    return;  // else: that send was canceled
  }
  const uint64_t plain = tag ^ jobKey_;
  auto first = [&](std::list<Posted>& list) {
    return std::find_if(list.begin(), list.end(), [&](const Posted& p) { return matches(plain, p.tag, p.mask); });
  };
  auto mine = first(from.posted);
  auto any = first(anyPeer_);
  std::list<Posted>* list = nullptr;
  std::list<Posted>::iterator found;
  if (mine != from.posted.end() && (any == anyPeer_.end() || mine->order < any->order)) {
    list = &from.posted;
    found = mine;
  } else if (any != anyPeer_.end()) {
    list = &anyPeer_;
    found = any;
  }
  if (list == nullptr) {
    Arrived& arrived = from.arrived.emplace_back(Arrived{kind, tag, bytes, id, {}, nextOrder_++});
    if (kind != kNote) {
      arrived.payload.assign(payload, payload + bytes);
    }
    ++arrivedCount_;
    return;
  }
  Posted posted = *found;
  list->erase(found);
  deliver(from, posted, kind, tag, id, payload, bytes);
}

void SharedMemoryTransport::deliver(Peer& from, const Posted& posted, uint32_t kind, uint64_t tag, uint64_t ackId,
                                    const std::byte* payload, std::size_t bytes) {
  Transfer& transfer = *posted.transfer;
  if (kind == kNote) {
    // The message itself comes over the network, with this very tag.
    transfer.carrier = network_.get();
    network_->recv(from.network, tag ^ jobKey_, ~uint64_t{0}, posted.data, posted.bytes, transfer);
    return;
  }
  if (bytes != 0) {
    std::memcpy(posted.data, payload, std::min(bytes, posted.bytes));
  }
  if (kind == kSyncData) {
    try {
      openLane(from);
      post(from, kAck, 0, ackId, nullptr, 0, nullptr);
    } catch (const Error& error) {
      UCXCOLL_WARN("cannot acknowledge a synchronous send: " << error.what());
    }
  }
  endWith(transfer, bytes > posted.bytes ? TransferStatus::Truncated : TransferStatus::Ok, bytes, tag ^ jobKey_);
}

bool SharedMemoryTransport::matchArrived(Peer* only, uint64_t tag, uint64_t mask, void* data, std::size_t bytes,
                                         Transfer& transfer) {
  if (arrivedCount_ == 0) {
    return false;
  }
  Peer* bestPeer = nullptr;
  std::deque<Arrived>::iterator best;
  auto consider = [&](Peer& peer) {
    for (auto it = peer.arrived.begin(); it != peer.arrived.end(); ++it) {
      if (matches(it->tag ^ jobKey_, tag, mask)) {
        if (bestPeer == nullptr || it->order < best->order) {
          bestPeer = &peer;
          best = it;
        }
        return;
      }
    }
  };
  if (only != nullptr) {
    consider(*only);
  } else {
    for (Peer& peer : peers_) {
      consider(peer);
    }
  }
  if (bestPeer == nullptr) {
    return false;
  }
  Arrived arrived = std::move(*best);
  bestPeer->arrived.erase(best);
  --arrivedCount_;
  transfer.inFlight = true;
  transfer.carrier = this;
  deliver(*bestPeer, Posted{tag, mask, data, bytes, &transfer, 0}, arrived.kind, arrived.tag, arrived.ackId,
          arrived.payload.data(), arrived.bytes);
  return true;
}

void SharedMemoryTransport::recv(PeerHandle from, uint64_t tag, uint64_t mask, void* data, std::size_t bytes,
                                 Transfer& transfer) {
  auto* peer = static_cast<Peer*>(from);
  if (peer != nullptr && !peer->lane) {
    transfer.carrier = network_.get();
    network_->recv(peer->network, tag, mask, data, bytes, transfer);
    return;
  }
  if (peer == nullptr) {
    if (recvWaiting(tag, mask, data, bytes, transfer)) {
      return;
    }
    transfer.inFlight = true;
    transfer.carrier = this;
    anyPeer_.push_back(Posted{tag, mask, data, bytes, &transfer, nextOrder_++});
    return;
  }
  if (matchArrived(peer, tag, mask, data, bytes, transfer)) {
    return;
  }
  transfer.inFlight = true;
  transfer.carrier = this;
  peer->posted.push_back(Posted{tag, mask, data, bytes, &transfer, nextOrder_++});
}

bool SharedMemoryTransport::recvWaiting(uint64_t tag, uint64_t mask, void* data, std::size_t bytes,
                                        Transfer& transfer) {
  pollRings();
  if (matchArrived(nullptr, tag, mask, data, bytes, transfer)) {
    return true;
  }
  void* previous = transfer.carrier;
  transfer.carrier = network_.get();
  if (network_->recvWaiting(tag, mask, data, bytes, transfer)) {
    return true;
  }
  transfer.carrier = previous;
  return false;
}

unsigned SharedMemoryTransport::serviceAnyPeer() {
  unsigned started = 0;
  for (auto it = anyPeer_.begin(); it != anyPeer_.end();) {
    Posted posted = *it;
    posted.transfer->carrier = network_.get();
    if (network_->recvWaiting(posted.tag, posted.mask, posted.data, posted.bytes, *posted.transfer)) {
      it = anyPeer_.erase(it);
      ++started;
    } else {
      posted.transfer->carrier = this;
      ++it;
    }
  }
  return started;
}

void SharedMemoryTransport::cancel(Transfer& transfer) {
  if (transfer.carrier != this) {
    network_->cancel(transfer);
    return;
  }
  auto dropFrom = [&](std::list<Posted>& list) {
    auto found = std::find_if(list.begin(), list.end(), [&](const Posted& p) { return p.transfer == &transfer; });
    if (found == list.end()) {
      return false;
    }
    list.erase(found);
    return true;
  };
  bool canceled = dropFrom(anyPeer_);
  for (Peer& peer : peers_) {
    if (canceled) {
      break;
    }
    canceled = dropFrom(peer.posted);
    for (auto& queued : peer.queued) {
      if (!canceled && queued.transfer == &transfer) {
        queued.transfer = nullptr;
        canceled = true;
      }
    }
    for (auto it = peer.awaitingAck.begin(); !canceled && it != peer.awaitingAck.end(); ++it) {
      if (it->second == &transfer) {
        peer.awaitingAck.erase(it);
        canceled = true;
        break;
      }
    }
  }
  if (canceled) {
    endWith(transfer, TransferStatus::Canceled);
  }
}

std::optional<ProbedMessage> SharedMemoryTransport::probe(uint64_t tag, uint64_t mask) {
  pollRings();
  const Arrived* best = nullptr;
  for (const Peer& peer : peers_) {
    for (const Arrived& arrived : peer.arrived) {
      if (matches(arrived.tag ^ jobKey_, tag, mask)) {
        if (best == nullptr || arrived.order < best->order) {
          best = &arrived;
        }
        break;
      }
    }
  }
  if (best != nullptr) {
    return ProbedMessage{best->tag ^ jobKey_, best->bytes};
  }
  return network_->probe(tag, mask);
}

std::size_t SharedMemoryTransport::discard(uint64_t tag, uint64_t mask) {
  pollRings();
  std::size_t dropped = 0;
  for (Peer& peer : peers_) {
    for (auto it = peer.arrived.begin(); it != peer.arrived.end();) {
      if (!matches(it->tag ^ jobKey_, tag, mask)) {
        ++it;
        continue;
      }
      if (it->kind == kSyncData && !peer.gone) {
        try {
          openLane(peer);
          post(peer, kAck, 0, it->ackId, nullptr, 0, nullptr);  // dropped counts as received
        } catch (const Error&) {
        }
      }
      if (it->kind == kNote) {
        // Its message comes over the network: taken into a sink (now, or
        // once it arrives), so that it can match no later receive.
        Sink& sink = sinks_.emplace_back();
        sink.buffer.resize(it->bytes);
        sink.carrier = network_.get();
        const uint64_t plain = it->tag ^ jobKey_;
        if (!network_->recvWaiting(plain, ~uint64_t{0}, sink.buffer.data(), sink.buffer.size(), sink)) {
          network_->recv(peer.network, plain, ~uint64_t{0}, sink.buffer.data(), sink.buffer.size(), sink);
        }
      }
      ++dropped;
      it = peer.arrived.erase(it);
      --arrivedCount_;
    }
  }
  return dropped + network_->discard(tag, mask);
}

// ---- Progress and sleep ----------------------------------------------------

unsigned SharedMemoryTransport::progress() {
  unsigned events = network_->progress();
  events += pollRings();
  if (queuedRecords_ != 0) {
    events += flushQueued();
  }
  if (!anyPeer_.empty()) {
    events += serviceAnyPeer();
  }
  if (!sinks_.empty()) {
    sinks_.remove_if([](const Sink& sink) { return sink.ended; });
  }
  return events;
}

bool SharedMemoryTransport::anythingToRead() const {
  std::byte* inbox = inbox_->data();
  const std::size_t claimed =
      std::min<std::size_t>(shared(headerOf(inbox).claimed).load(std::memory_order_acquire), kRings);
  for (std::size_t index = 0; index < claimed; ++index) {
    Ring& ring = ringOf(inbox, index);
    if (incoming_[index] == nullptr ? shared(ring.ready).load(std::memory_order_acquire) != 0
                                    : shared(ring.head).load(std::memory_order_acquire) != readUpTo_[index]) {
      return true;
    }
  }
  return false;
}

void SharedMemoryTransport::waitForActivity(int timeoutMs) {
  if (!inbox_) {
    network_->waitForActivity(timeoutMs);
    return;
  }
  auto sleeping = shared(headerOf(inbox_->data()).sleeping);
  sleeping.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (anythingToRead()) {
    sleeping.store(0, std::memory_order_relaxed);
    return;
  }
  // Room in a full ring is made by its reader, who does not wake writers.
  if (queuedRecords_ != 0) {
    timeoutMs = std::min(timeoutMs, 1);
  }
  network_->waitForActivity(timeoutMs);
  sleeping.store(0, std::memory_order_relaxed);
}

void SharedMemoryTransport::interrupt() {
  network_->interrupt();
}

// ---- Failures ----------------------------------------------------------------

void SharedMemoryTransport::peerGone(PeerHandle handle) {
  Peer& peer = *static_cast<Peer*>(handle);
  network_->peerGone(peer.network);
  if (!peer.lane || peer.gone) {
    return;
  }
  peer.gone = true;
  const std::string detail = "the process " + std::to_string(peer.identity.inbox.pid) + " is gone";
  auto queued = std::exchange(peer.queued, {});
  queuedRecords_ -= queued.size();
  for (auto& record : queued) {
    if ((record.kind == kData || record.kind == kSyncData) && record.transfer != nullptr) {
      endWith(*record.transfer, TransferStatus::PeerLost, 0, 0, detail);
    }
  }
  for (auto& [id, transfer] : std::exchange(peer.awaitingAck, {})) {
    endWith(*transfer, TransferStatus::PeerLost, 0, 0, detail);
  }
}

std::vector<PeerFailure> SharedMemoryTransport::takeFailedPeers() {
  std::vector<PeerFailure> failures = network_->takeFailedPeers();
  for (auto& failure : failures) {
    if (auto found = byNetworkHandle_.find(failure.peer); found != byNetworkHandle_.end()) {
      Peer* peer = found->second;
      failure.peer = peer;
      // The network transport connects afresh to this address from now
      // on; so do we, for a peer reached through it alone (a lane's ring
      // stays claimed by the peer entry it has). The failed entry lives
      // on for the groups that hold it.
      if (!peer->lane) {
        std::erase_if(byAddress_, [peer](const auto& entry) { return entry.second == peer; });
      }
    }
  }
  return failures;
}

bool SharedMemoryTransport::hasFailedPeers() const {
  return network_->hasFailedPeers();
}

std::map<std::string, uint64_t> SharedMemoryTransport::bytesMovedByPeerAddress() const {
  return network_->bytesMovedByPeerAddress();  // other hosts are reached through it
}

void SharedMemoryTransport::setJobKey(uint64_t key) {
  jobKey_ = key;
  network_->setJobKey(key);
}

void SharedMemoryTransport::setFailureListener(std::function<void()> listener) {
  network_->setFailureListener(std::move(listener));
}

void SharedMemoryTransport::endWith(Transfer& transfer, TransferStatus status, std::size_t length, uint64_t senderTag,
                                    std::string detail) {
  transfer.inFlight = false;
  transfer.native = nullptr;
  TransferResult result;
  result.status = status;
  result.length = length;
  result.senderTag = senderTag;
  result.detail = std::move(detail);
  transfer.transferDone(result);
}

}  // namespace ucxcoll
