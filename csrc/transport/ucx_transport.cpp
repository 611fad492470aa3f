#include "transport/ucx_transport.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ucs/debug/log_def.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "common/error.hpp"
#include "common/logging.hpp"
#include "transport/tag.hpp"
#include "transport/tcp_progress.hpp"

namespace ucxcoll {
namespace {

void check(ucs_status_t status, const char* what) {
  if (status != UCS_OK) {
    throw Error(std::string("UCX ") + what + " failed: " + ucs_status_string(status));
  }
}

// Releases a buffer UCX allocated for us (worker address).
struct WorkerAddressDeleter {
  ucp_worker_h worker;
  void operator()(ucp_address_t* address) const { ucp_worker_release_address(worker, address); }
};

// The most devices UCX splits one message across (its UCP_MAX_RAILS).
constexpr int kMaxRails = 4;

constexpr auto kEndpointCloseTimeout = std::chrono::seconds(2);
constexpr auto kDiscardTimeout = std::chrono::seconds(2);
// How long a closing transport waits for its farewells' acknowledgements:
// a live peer answers within its engine's idle service period, even while
// busy in Python; one that does not is gone or unreachable.
constexpr auto kFarewellTimeout = std::chrono::seconds(2);

// The farewell messages (FarewellMessage::kind).
constexpr uint64_t kFarewell = 1;
constexpr uint64_t kFarewellAck = 2;

// Farewells go without the job key (a peer may take the farewell of a
// process it never joined a job with; it knows no endpoint by that key and
// drops it).
constexpr uint64_t farewellTag() {
  return (static_cast<uint64_t>(tag::Kind::Internal) << tag::kKindShift) |
         (uint64_t{tag::kFarewell} << tag::kPurposeShift);
}

// FNV-1a: the key a farewell names its sender by.
uint64_t keyOf(const std::vector<uint8_t>& address) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (uint8_t byte : address) {
    hash = (hash ^ byte) * 0x100000001b3ULL;
  }
  return hash;
}

TransferResult resultOf(ucs_status_t status) {
  TransferResult result;
  if (status == UCS_OK) {
    result.status = TransferStatus::Ok;
  } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    result.status = TransferStatus::Truncated;
  } else if (status == UCS_ERR_CANCELED) {
    result.status = TransferStatus::Canceled;
  } else if (status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_ENDPOINT_TIMEOUT) {
    // What a network lane reports once the peer is gone; the endpoint's
    // error handler (endpointFailed) reports the same for the whole peer,
    // but a transfer may end before the engine has taken that in.
    result.status = TransferStatus::PeerLost;
    result.detail = ucs_status_string(status);
  } else {
    result.status = TransferStatus::Failed;
    result.detail = ucs_status_string(status);
  }
  return result;
}

// Whether UCX's errors on this thread are ours to report: inside a call
// whose failure raises an exception that says more (a peer with no route
// to it), and at teardown, where a peer that left before us makes UCX
// complain about connections nobody needs any more. They are logged at
// UCXCOLL_LOG_LEVEL=debug instead of on stderr.
thread_local bool tQuietUcxErrors = false;

struct QuietUcxErrors {
  QuietUcxErrors() : outer(std::exchange(tQuietUcxErrors, true)) {}
  ~QuietUcxErrors() { tQuietUcxErrors = outer; }
  QuietUcxErrors(const QuietUcxErrors&) = delete;
  QuietUcxErrors& operator=(const QuietUcxErrors&) = delete;
  const bool outer;
};

ucs_log_func_rc_t quietenUcxLog(const char* file, unsigned line, const char* /*function*/, ucs_log_level_t level,
                                const ucs_log_component_config_t* /*component*/, const char* format,
                                va_list arguments) {
  if (!tQuietUcxErrors || level > UCS_LOG_LEVEL_WARN) {
    return UCS_LOG_FUNC_RC_CONTINUE;
  }
  if (logLevel() >= LogLevel::Debug) {
    char text[512];
    va_list copy;
    va_copy(copy, arguments);
    std::vsnprintf(text, sizeof(text), format, copy);
    va_end(copy);
    UCXCOLL_DEBUG("UCX said (" << file << ":" << line << "): " << text);
  }
  return UCS_LOG_FUNC_RC_STOP;
}

// How deep the calling thread is in our own calls into UCX. A completion
// callback that finds it at 0 runs on a thread of UCX's own.
thread_local int tUcxCallDepth = 0;

struct InsideUcx {
  InsideUcx() { ++tUcxCallDepth; }
  ~InsideUcx() { --tUcxCallDepth; }
  InsideUcx(const InsideUcx&) = delete;
  InsideUcx& operator=(const InsideUcx&) = delete;
};

}  // namespace

// Queues a completion reported on UCX's async thread for the driver.
void deferCompletion(Transfer& transfer, const TransferResult& result) {
  auto& transport = *static_cast<UcxTransport*>(transfer.carrier);
  {
    std::lock_guard<std::mutex> lock(transport.deferredMutex_);
    transfer.inFlight = false;
    transfer.native = nullptr;
    transport.deferred_.emplace_back(&transfer, result);
    transport.hasDeferred_.store(true, std::memory_order_release);
  }
  UCXCOLL_DEBUG("a UCX completion arrived on a thread of UCX's own; the driver ends it");
  transport.interrupt();
}

namespace {

// The transport forgets the request before telling the transfer, so that
// a cancel() from the handler cannot reach a freed request.
void finish(Transfer& transfer, const TransferResult& result) {
  if (tUcxCallDepth == 0) {
    deferCompletion(transfer, result);
    return;
  }
  transfer.inFlight = false;
  transfer.native = nullptr;
  transfer.transferDone(result);
}

void sendDone(void* request, ucs_status_t status, void* userData) {
  ucp_request_free(request);
  finish(*static_cast<Transfer*>(userData), resultOf(status));
}

void recvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* userData) {
  auto& transfer = *static_cast<Transfer*>(userData);
  TransferResult result = resultOf(status);
  if (info != nullptr && status != UCS_ERR_CANCELED) {
    result.length = info->length;
    result.senderTag = info->sender_tag ^ static_cast<UcxTransport*>(transfer.carrier)->jobKey();
  }
  ucp_request_free(request);
  finish(transfer, result);
}

}  // namespace

// A request UCX returned: in flight, or (UCP_OP_ATTR_FLAG_NO_IMM_CMPL) one
// whose callback already ran, inside the call or on UCX's async thread.
void UcxTransport::track(Transfer& transfer, ucs_status_ptr_t request, const char* what) {
  if (UCS_PTR_IS_ERR(request)) {
    TransferResult failed = resultOf(UCS_PTR_STATUS(request));
    if (failed.status == TransferStatus::Failed) {
      failed.detail = std::string(what) + ": " + failed.detail;
    }
    finish(transfer, failed);
  } else if (request == nullptr) {
    finish(transfer, TransferResult{});  // done at once; no callback follows
  } else {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    if (transfer.inFlight) {
      transfer.native = request;
    }
  }
}

unsigned UcxTransport::progress() {
  InsideUcx inside;
  unsigned events = ucp_worker_progress(worker_.get());
  if (hasDeferred_.load(std::memory_order_acquire)) {
    events += endDeferred();
  }
  if (hasFarewells_.load(std::memory_order_acquire)) {
    takeFarewells();
    ++events;
  }
  return events;
}

unsigned UcxTransport::endDeferred() {
  std::vector<std::pair<Transfer*, TransferResult>> ended;
  {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    ended.swap(deferred_);
    hasDeferred_.store(false, std::memory_order_relaxed);
  }
  for (auto& [transfer, result] : ended) {
    transfer->transferDone(result);
  }
  return static_cast<unsigned>(ended.size());
}

UcxTransport::UcxTransport(const NetworkDevices& networkDevices) {
  static std::once_flag logHandlerPushed;
  std::call_once(logHandlerPushed, [] { ucs_log_push_handler(&quietenUcxLog); });
  ucp_config_t* rawConfig = nullptr;
  check(ucp_config_read(nullptr, nullptr, &rawConfig), "ucp_config_read");
  UcpConfigPtr config(rawConfig);
  std::string rails;
  if (!networkDevices.ucxValue.empty()) {
    check(ucp_config_modify(config.get(), "NET_DEVICES", networkDevices.ucxValue.c_str()), "ucp_config_modify");
    // Several devices listed: a large message is split across all of them
    // that reach the peer (UCX's rails). UCX splits only its rendezvous
    // protocol, over at most 2 devices, by default; over TCP messages up to
    // tens of MiB go as fragmented eager sends, which it does not split at
    // all, so both limits are raised here unless the user set them.
    if (networkDevices.rails > 1) {
      const std::string count = std::to_string(std::min(networkDevices.rails, kMaxRails));
      for (const char* limit : {"MAX_EAGER_RAILS", "MAX_RNDV_RAILS"}) {
        if (std::getenv((std::string("UCX_") + limit).c_str()) == nullptr) {
          check(ucp_config_modify(config.get(), limit, count.c_str()), "ucp_config_modify");
          rails = "; large messages split across up to " + count + " of them";
        }
      }
    }
  }
  if (!networkDevices.reason.empty()) {
    UCXCOLL_INFO("UCX network devices: " << networkDevices.inUse << " (" << networkDevices.reason << ")" << rails);
  }

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  // WAKEUP gives us the worker fd to sleep on instead of spinning.
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  ucp_context_h rawContext = nullptr;
  check(ucp_init(&params, config.get(), &rawContext), "ucp_init");
  context_.reset(rawContext);

  ucp_worker_params_t workerParams{};
  workerParams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  workerParams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h rawWorker = nullptr;
  check(ucp_worker_create(context_.get(), &workerParams, &rawWorker), "ucp_worker_create");
  worker_.reset(rawWorker);

  ucp_address_t* rawAddress = nullptr;
  size_t addressLength = 0;
  check(ucp_worker_get_address(worker_.get(), &rawAddress, &addressLength), "ucp_worker_get_address");
  std::unique_ptr<ucp_address_t, WorkerAddressDeleter> address(rawAddress, WorkerAddressDeleter{worker_.get()});
  const auto* bytes = reinterpret_cast<const uint8_t*>(address.get());
  address_.assign(bytes, bytes + addressLength);
  farewell_ = FarewellMessage{kFarewell, keyOf(address_)};
  farewellAck_ = FarewellMessage{kFarewellAck, keyOf(address_)};

  check(ucp_worker_get_efd(worker_.get(), &workerFd_), "ucp_worker_get_efd");
  epoll_ = FileDescriptor(::epoll_create1(EPOLL_CLOEXEC));
  interrupt_ = FileDescriptor(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (epoll_.get() < 0 || interrupt_.get() < 0) {
    throw Error(std::string("cannot create wakeup descriptors: ") + std::strerror(errno));
  }
  for (int fd : {workerFd_, interrupt_.get()}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      throw Error(std::string("epoll_ctl failed: ") + std::strerror(errno));
    }
  }
  postFarewellReceive();
  UCXCOLL_DEBUG("UCX worker created, address " << address_.size() << " bytes");
}

UcxTransport::~UcxTransport() {
  {
    // Whoever listened for failures is going away (the engine).
    std::lock_guard<std::mutex> lock(deferredMutex_);
    failureListener_ = nullptr;
  }
  // Messages nobody received (peers' collectives this process never ran):
  // taken here, so that UCX does not warn about each at teardown.
  discard(0, 0);
  QuietUcxErrors quiet;
  {
    InsideUcx inside;
    sayFarewells();
  }
  closeEndpoints();
  endFarewellReceive();
  discard(0, 0);  // and those that arrived while the endpoints closed
}

// UCX's error handler for endpoints to other hosts: the connection broke
// (the peer's process or host is gone). Queued for the driver.
void endpointFailed(void* endpoint, ucp_ep_h /*handle*/, ucs_status_t status) {
  auto& peer = *static_cast<UcxTransport::Endpoint*>(endpoint);
  auto& self = *peer.transport;
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(self.deferredMutex_);
    peer.broken = true;
    self.failedPeers_.push_back(PeerFailure{endpoint, ucs_status_string(status)});
    self.hasFailedPeers_.store(true, std::memory_order_release);
    listener = self.failureListener_;
  }
  self.interrupt();
  if (listener) {
    listener();
  }
}

std::vector<PeerFailure> UcxTransport::takeFailedPeers() {
  std::vector<PeerFailure> failures;
  {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    hasFailedPeers_.store(false, std::memory_order_relaxed);
    failures = std::exchange(failedPeers_, {});
  }
  // A failed endpoint stays failed: a later connect() to the same address
  // (a new group after the link came back) makes a new one. The failed one
  // lives on, force-closed at the end, since groups still hold it. The end
  // of a connection whose peer left was reported as its departure already.
  std::erase_if(failures, [this](const PeerFailure& failure) {
    auto* endpoint = static_cast<Endpoint*>(failure.peer);
    const bool alreadyReported = endpoint->failed;
    endpoint->failed = true;
    std::erase_if(endpoints_, [endpoint](const auto& entry) { return entry.second == endpoint; });
    return alreadyReported && !failure.departed;
  });
  return failures;
}

PeerHandle UcxTransport::connect(const std::vector<uint8_t>& peerAddress, PeerLocation location) {
  InsideUcx inside;
  auto found = endpoints_.find(peerAddress);
  if (found != endpoints_.end()) {
    return found->second;
  }
  Endpoint& endpoint = endpointStore_.emplace_back();
  endpoint.transport = this;
  endpoint.peerKey = keyOf(peerAddress);
  endpoint.otherHost = location == PeerLocation::OtherHost;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  params.address = reinterpret_cast<const ucp_address_t*>(peerAddress.data());
  // Peers on this host: no UCP_ERR_HANDLING_MODE_PEER, which would disable
  // the shared-memory transports; the engine watches their processes
  // instead (engine/peer_watch.hpp). Peers on other hosts are reached over
  // the network, whose lanes do report a broken connection.
  if (endpoint.otherHost) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &endpointFailed;
    params.err_handler.arg = &endpoint;
  }
  ucs_status_t status;
  {
    QuietUcxErrors quiet;  // "no route" is ours to say, naming the rank
    status = ucp_ep_create(worker_.get(), &params, &endpoint.handle);
  }
  if (status != UCS_OK) {
    endpointStore_.pop_back();
    if (status == UCS_ERR_UNREACHABLE) {
      throw UnreachableError("UCX finds no route from this host's network devices to the peer's");
    }
    check(status, "ucp_ep_create");
  }
  endpoints_.emplace(peerAddress, &endpoint);
  return &endpoint;
}

// ---- Farewells ---------------------------------------------------------------

void farewellArrived(void* request, ucs_status_t status, const ucp_tag_recv_info_t* /*info*/, void* transport) {
  auto& self = *static_cast<UcxTransport*>(transport);
  ucp_request_free(request);
  std::lock_guard<std::mutex> lock(self.deferredMutex_);
  self.farewellReceive_ = nullptr;
  self.farewellReceiveEnded_ = true;
  if (status == UCS_OK) {
    self.farewellsArrived_.push_back(self.farewellInbox_);
  }
  // The driver takes it and posts the receive again (takeFarewells).
  self.hasFarewells_.store(true, std::memory_order_release);
  if (tUcxCallDepth == 0) {
    self.interrupt();
  }
}

void UcxTransport::postFarewellReceive() {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &farewellArrived;
  param.user_data = this;
  {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    farewellReceiveEnded_ = false;
  }
  // Not under the lock: a farewell already here ends the receive inside
  // this call.
  ucs_status_ptr_t request =
      ucp_tag_recv_nbx(worker_.get(), &farewellInbox_, sizeof(farewellInbox_), farewellTag(), tag::kMatchAll, &param);
  std::lock_guard<std::mutex> lock(deferredMutex_);
  if (UCS_PTR_IS_ERR(request)) {
    farewellReceiveEnded_ = true;  // peers that leave are then seen as failing
    UCXCOLL_WARN("cannot post the farewell receive: " << ucs_status_string(UCS_PTR_STATUS(request)));
  } else if (!farewellReceiveEnded_) {
    farewellReceive_ = request;
  }
}

void UcxTransport::sendFarewell(Endpoint& endpoint, const FarewellMessage& message) {
  ucp_request_param_t param{};  // no callback: UCX frees the request when it ends
  ucs_status_ptr_t request = ucp_tag_send_nbx(endpoint.handle, &message, sizeof(message), farewellTag(), &param);
  if (UCS_PTR_IS_PTR(request)) {
    ucp_request_free(request);
  }
}

void UcxTransport::takeFarewells() {
  std::vector<FarewellMessage> arrived;
  bool repost = false;
  {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    arrived.swap(farewellsArrived_);
    hasFarewells_.store(false, std::memory_order_relaxed);
    repost = farewellReceiveEnded_ && !closing_;
  }
  if (repost) {
    postFarewellReceive();
  }
  std::vector<PeerFailure> departures;
  for (const FarewellMessage& message : arrived) {
    for (Endpoint& endpoint : endpointStore_) {
      if (endpoint.peerKey != message.senderKey || !endpoint.otherHost || endpoint.handle == nullptr) {
        continue;
      }
      if (message.kind == kFarewellAck) {
        endpoint.acknowledged = true;
      } else if (message.kind == kFarewell && !endpoint.departed) {
        endpoint.departed = true;
        if (!endpoint.failed && !endpoint.dead) {
          sendFarewell(endpoint, farewellAck_);
          departures.push_back(PeerFailure{
              &endpoint, "it closed ucxcoll: its process destroyed its process groups or is exiting", true});
        }
      }
    }
  }
  if (!departures.empty()) {
    std::function<void()> listener;
    {
      std::lock_guard<std::mutex> lock(deferredMutex_);
      failedPeers_.insert(failedPeers_.end(), departures.begin(), departures.end());
      hasFailedPeers_.store(true, std::memory_order_release);
      listener = failureListener_;
    }
    if (listener) {
      listener();
    }
  }
}

void UcxTransport::endFarewellReceive() {
  InsideUcx inside;
  void* request = nullptr;
  {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    closing_ = true;
    request = farewellReceive_;
  }
  if (request == nullptr) {
    return;
  }
  ucp_request_cancel(worker_.get(), request);
  const auto giveUp = std::chrono::steady_clock::now() + kDiscardTimeout;
  for (;;) {
    ucp_worker_progress(worker_.get());
    std::lock_guard<std::mutex> lock(deferredMutex_);
    if (farewellReceiveEnded_ || std::chrono::steady_clock::now() >= giveUp) {
      return;
    }
  }
}

void UcxTransport::sayFarewells() {
  std::vector<Endpoint*> waiting;
  for (Endpoint& endpoint : endpointStore_) {
    if (endpoint.otherHost && endpoint.handle != nullptr && !endpoint.failed && !endpoint.dead && !endpoint.departed) {
      sendFarewell(endpoint, farewell_);
      waiting.push_back(&endpoint);
    }
  }
  const auto giveUp = std::chrono::steady_clock::now() + kFarewellTimeout;
  while (!waiting.empty() && std::chrono::steady_clock::now() < giveUp) {
    ucp_worker_progress(worker_.get());
    takeFarewells();
    {
      std::lock_guard<std::mutex> lock(deferredMutex_);
      std::erase_if(waiting, [](const Endpoint* endpoint) {
        return endpoint->acknowledged || endpoint->departed || endpoint->broken;
      });
    }
    if (!waiting.empty() && !hasFarewells_.load(std::memory_order_acquire)) {
      waitForActivity(10);
    }
  }
  if (!waiting.empty()) {
    UCXCOLL_DEBUG(waiting.size() << " peer(s) on other hosts did not acknowledge this process's farewell within "
                                 << kFarewellTimeout.count() << " s");
  }
}

void UcxTransport::send(PeerHandle peer, uint64_t tag, const void* data, std::size_t bytes, SendMode mode,
                        Transfer& transfer) {
  InsideUcx inside;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &sendDone;
  param.user_data = &transfer;
  transfer.inFlight = true;
  transfer.carrier = this;
  ucp_ep_h endpoint = static_cast<Endpoint*>(peer)->handle;
  ucs_status_ptr_t request = mode == SendMode::Synchronous
                                 ? ucp_tag_send_sync_nbx(endpoint, data, bytes, tag ^ jobKey(), &param)
                                 : ucp_tag_send_nbx(endpoint, data, bytes, tag ^ jobKey(), &param);
  track(transfer, request, "send");
}

namespace {

// Always through the callback, even when the message is already here:
// UCX 1.13 does not fill recv_info reliably on immediate completion.
ucp_request_param_t receiveParameters(Transfer& transfer) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &recvDone;
  param.user_data = &transfer;
  return param;
}

}  // namespace

void UcxTransport::recv(PeerHandle /*from*/, uint64_t tag, uint64_t mask, void* data, std::size_t bytes,
                        Transfer& transfer) {
  InsideUcx inside;
  ucp_request_param_t param = receiveParameters(transfer);
  transfer.inFlight = true;
  transfer.carrier = this;
  track(transfer, ucp_tag_recv_nbx(worker_.get(), data, bytes, tag ^ jobKey(), mask, &param), "receive");
}

bool UcxTransport::recvWaiting(uint64_t tag, uint64_t mask, void* data, std::size_t bytes, Transfer& transfer) {
  InsideUcx inside;
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h message = ucp_tag_probe_nb(worker_.get(), tag ^ jobKey(), mask, 1, &info);
  if (message == nullptr) {
    return false;
  }
  ucp_request_param_t param = receiveParameters(transfer);
  transfer.inFlight = true;
  transfer.carrier = this;
  track(transfer, ucp_tag_msg_recv_nbx(worker_.get(), data, bytes, message, &param), "receive");
  return true;
}

void UcxTransport::cancel(Transfer& transfer) {
  InsideUcx inside;
  void* request = nullptr;
  {
    std::lock_guard<std::mutex> lock(deferredMutex_);
    request = transfer.native;
  }
  if (request != nullptr) {
    ucp_request_cancel(worker_.get(), request);
  }
}

std::optional<ProbedMessage> UcxTransport::probe(uint64_t tag, uint64_t mask) {
  InsideUcx inside;
  ucp_tag_recv_info_t info{};
  if (ucp_tag_probe_nb(worker_.get(), tag ^ jobKey(), mask, 0, &info) == nullptr) {
    return std::nullopt;
  }
  return ProbedMessage{info.sender_tag ^ jobKey(), info.length};
}

std::size_t UcxTransport::discard(uint64_t tag, uint64_t mask) {
  InsideUcx inside;
  std::size_t dropped = 0;
  for (;;) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_.get(), tag ^ jobKey(), mask, 1, &info);
    if (message == nullptr) {
      return dropped;
    }
    std::vector<std::byte> sink(info.length);
    ucp_request_param_t param{};
    ucs_status_ptr_t request = ucp_tag_msg_recv_nbx(worker_.get(), sink.data(), sink.size(), message, &param);
    if (UCS_PTR_IS_PTR(request)) {
      auto giveUp = std::chrono::steady_clock::now() + kDiscardTimeout;
      while (ucp_request_check_status(request) == UCS_INPROGRESS && std::chrono::steady_clock::now() < giveUp) {
        ucp_worker_progress(worker_.get());
      }
      if (ucp_request_check_status(request) == UCS_INPROGRESS) {
        // The sender vanished mid-transfer; keep the sink alive for UCX.
        ucp_request_cancel(worker_.get(), request);
        abandonedBuffers_.push_back(std::move(sink));
      }
      ucp_request_free(request);
    }
    ++dropped;
  }
}

void UcxTransport::closeEndpoints() {
  InsideUcx inside;
  // Flush-close every endpoint so that data already handed to UCX reaches the
  // peer; a peer that is gone cannot acknowledge, so give up after a bound
  // and force-close the rest.
  std::vector<void*> pending;
  auto close = [&](ucp_ep_h endpoint, bool force) {
    ucp_request_param_t param{};
    if (force) {
      // Nobody will acknowledge a flush: close at once, without asking.
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t request = ucp_ep_close_nbx(endpoint, &param);
    if (UCS_PTR_IS_PTR(request)) {
      pending.push_back(request);
    }
  };
  for (const Endpoint& endpoint : endpointStore_) {
    // A failed endpoint: UCX asks for a forced close.
    close(endpoint.handle, endpoint.dead || endpoint.failed);
  }
  endpoints_.clear();
  auto giveUp = std::chrono::steady_clock::now() + kEndpointCloseTimeout;
  while (!pending.empty() && std::chrono::steady_clock::now() < giveUp) {
    ucp_worker_progress(worker_.get());
    std::erase_if(pending, [](void* request) {
      if (ucp_request_check_status(request) == UCS_INPROGRESS) {
        return false;
      }
      ucp_request_free(request);
      return true;
    });
  }
  if (!pending.empty()) {
    UCXCOLL_DEBUG(pending.size() << " endpoint(s) did not close within the bound; peers likely gone");
    for (void* request : pending) {
      ucp_request_cancel(worker_.get(), request);
      ucp_request_free(request);
    }
  }
}

void UcxTransport::waitForActivity(int timeoutMs) {
  InsideUcx inside;
  ucs_status_t status = ucp_worker_arm(worker_.get());
  if (status == UCS_ERR_BUSY) {
    return;  // events are already pending: the caller should progress
  }
  check(status, "ucp_worker_arm");
  epoll_event events[3];
  int ready = ::epoll_wait(epoll_.get(), events, 3, timeoutMs);
  if (ready < 0 && errno != EINTR) {
    throw Error(std::string("epoll_wait failed: ") + std::strerror(errno));
  }
  for (int i = 0; i < ready; ++i) {
    if (events[i].data.fd == interrupt_.get()) {
      uint64_t count = 0;
      [[maybe_unused]] auto read = ::read(interrupt_.get(), &count, sizeof(count));
    } else if (events[i].data.fd == wakeupFd_) {
      char sink[64];
      while (::read(wakeupFd_, sink, sizeof(sink)) > 0) {
      }
    }
  }
}

bool UcxTransport::watchWakeupFd(int fd) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  if (wakeupFd_ >= 0 || ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
    return false;
  }
  wakeupFd_ = fd;
  return true;
}

void UcxTransport::peerGone(PeerHandle peer) {
  static_cast<Endpoint*>(peer)->dead = true;
}

void UcxTransport::interrupt() {
  uint64_t one = 1;
  // A full counter already means "wake up"; nothing else can go wrong here.
  [[maybe_unused]] auto written = ::write(interrupt_.get(), &one, sizeof(one));
}

std::map<std::string, uint64_t> UcxTransport::bytesMovedByPeerAddress() const {
  return tcpBytesByPeerAddress();
}

}  // namespace ucxcoll
