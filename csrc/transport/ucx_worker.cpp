#include "transport/ucx_worker.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.hpp"
#include "common/logging.hpp"

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

constexpr auto kEndpointCloseTimeout = std::chrono::seconds(2);

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

UcxWorker::UcxWorker() {
  ucp_config_t* rawConfig = nullptr;
  check(ucp_config_read(nullptr, nullptr, &rawConfig), "ucp_config_read");
  UcpConfigPtr config(rawConfig);

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
  UCXCOLL_DEBUG("UCX worker created, address " << address_.size() << " bytes");
}

UcxWorker::~UcxWorker() {
  closeEndpoints();
}

ucp_ep_h UcxWorker::connect(const std::vector<uint8_t>& peerAddress) {
  auto found = endpoints_.find(peerAddress);
  if (found != endpoints_.end()) {
    return found->second;
  }
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  params.address = reinterpret_cast<const ucp_address_t*>(peerAddress.data());
  // No UCP_ERR_HANDLING_MODE_PEER: it disables shared-memory transports
  // (see DESIGN.md); dead peers are caught by deadlines instead.
  ucp_ep_h endpoint = nullptr;
  check(ucp_ep_create(worker_.get(), &params, &endpoint), "ucp_ep_create");
  endpoints_.emplace(peerAddress, endpoint);
  return endpoint;
}

void UcxWorker::closeEndpoints() {
  // Flush-close every endpoint so that data already handed to UCX reaches the
  // peer; a peer that is gone cannot acknowledge, so give up after a bound
  // and force-close the rest.
  std::vector<void*> pending;
  for (auto& [address, endpoint] : endpoints_) {
    ucp_request_param_t param{};
    ucs_status_ptr_t request = ucp_ep_close_nbx(endpoint, &param);
    if (UCS_PTR_IS_PTR(request)) {
      pending.push_back(request);
    }
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

void UcxWorker::waitForActivity(int timeoutMs) {
  ucs_status_t status = ucp_worker_arm(worker_.get());
  if (status == UCS_ERR_BUSY) {
    return;  // events are already pending: the caller should progress
  }
  check(status, "ucp_worker_arm");
  epoll_event events[2];
  int ready = ::epoll_wait(epoll_.get(), events, 2, timeoutMs);
  if (ready < 0 && errno != EINTR) {
    throw Error(std::string("epoll_wait failed: ") + std::strerror(errno));
  }
  for (int i = 0; i < ready; ++i) {
    if (events[i].data.fd == interrupt_.get()) {
      drainInterrupts();
    }
  }
}

void UcxWorker::interrupt() {
  uint64_t one = 1;
  // A full counter already means "wake up"; nothing else can go wrong here.
  [[maybe_unused]] auto written = ::write(interrupt_.get(), &one, sizeof(one));
}

void UcxWorker::drainInterrupts() {
  uint64_t count = 0;
  [[maybe_unused]] auto read = ::read(interrupt_.get(), &count, sizeof(count));
}

std::string UcxWorker::statusText(ucs_status_t status) {
  return ucs_status_string(status);
}

}  // namespace ucxcoll
