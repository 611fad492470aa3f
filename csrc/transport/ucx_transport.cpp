#include "transport/ucx_transport.hpp"

#include <chrono>
#include <sstream>
#include <string>

#include "common/config.hpp"
#include "common/error.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {
namespace {

// Longest single sleep: bounds how late a deadline or an abort is noticed.
constexpr int kMaxSleepMs = 200;

constexpr const char* kDisagreement = " (ranks disagree about the tensor sizes or the order of collectives)";

std::string sizeMismatch(int peer, std::size_t expected, std::size_t received) {
  return "rank " + std::to_string(peer) + " sent " + std::to_string(received) + " bytes where " +
         std::to_string(expected) + " were expected" + kDisagreement;
}

// UCX reports only that the message did not fit, not its size.
std::string truncated(int peer, std::size_t expected) {
  return "rank " + std::to_string(peer) + " sent more than the " + std::to_string(expected) + " bytes expected" +
         kDisagreement;
}

}  // namespace

UcxTransport::UcxTransport(UcxWorker& worker, int rank, std::vector<ucp_ep_h> endpoints)
    : worker_(worker), rank_(rank), endpoints_(std::move(endpoints)) {}

UcxTransport::~UcxTransport() {
  cancelPending();
}

void UcxTransport::checkPeer(int peer) const {
  if (peer < 0 || peer >= size()) {
    throw Error("peer rank " + std::to_string(peer) + " is outside the group of size " + std::to_string(size()));
  }
}

void UcxTransport::postSend(int peer, uint64_t tag, const void* data, std::size_t bytes) {
  checkPeer(peer);
  ucp_request_param_t param{};
  ucs_status_ptr_t request = ucp_tag_send_nbx(endpoints_[peer], data, bytes, tag, &param);
  if (UCS_PTR_IS_ERR(request)) {
    throw Error("send to rank " + std::to_string(peer) + " failed: " + UcxWorker::statusText(UCS_PTR_STATUS(request)));
  }
  if (request != nullptr) {
    pending_.push_back({request, false, peer, bytes});
  }
}

void UcxTransport::postRecv(int peer, uint64_t tag, void* data, std::size_t bytes) {
  checkPeer(peer);
  ucp_request_param_t param{};
  // Always get a request back, even when the message is already here: the
  // received length is then read from the request. (UCX 1.13 does not
  // report it reliably through recv_info on immediate completion.)
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t request = ucp_tag_recv_nbx(worker_.handle(), data, bytes, tag, tag::kMatchAll, &param);
  if (UCS_PTR_IS_ERR(request)) {
    throw Error("receive from rank " + std::to_string(peer) +
                " failed: " + UcxWorker::statusText(UCS_PTR_STATUS(request)));
  }
  pending_.push_back({request, true, peer, bytes});
}

std::size_t UcxTransport::reapCompleted(std::string& failure, bool& mismatch) {
  std::size_t finished = 0;
  std::erase_if(pending_, [&](const PendingOperation& op) {
    ucs_status_t status;
    ucp_tag_recv_info_t info{};
    if (op.isReceive) {
      status = ucp_tag_recv_request_test(op.request, &info);
    } else {
      status = ucp_request_check_status(op.request);
    }
    if (status == UCS_INPROGRESS) {
      return false;
    }
    ucp_request_free(op.request);
    ++finished;
    if (!failure.empty()) {
      return true;
    }
    if (status == UCS_ERR_MESSAGE_TRUNCATED) {
      failure = truncated(op.peer, op.bytes);
      mismatch = true;
    } else if (status != UCS_OK) {
      failure = std::string(op.isReceive ? "receive from" : "send to") + " rank " + std::to_string(op.peer) +
                " failed: " + UcxWorker::statusText(status);
    } else if (op.isReceive && info.length != op.bytes) {
      failure = sizeMismatch(op.peer, op.bytes, info.length);
      mismatch = true;
    }
    return true;
  });
  return finished;
}

std::string UcxTransport::describePending() const {
  std::ostringstream receives;
  std::ostringstream sends;
  std::vector<bool> seenReceive(endpoints_.size(), false);
  std::vector<bool> seenSend(endpoints_.size(), false);
  for (const auto& op : pending_) {
    auto& seen = op.isReceive ? seenReceive : seenSend;
    if (!seen[op.peer]) {
      seen[op.peer] = true;
      auto& out = op.isReceive ? receives : sends;
      out << (out.tellp() > 0 ? ", " : "") << op.peer;
    }
  }
  std::ostringstream out;
  if (receives.tellp() > 0) {
    out << "no data from rank(s) [" << receives.str() << "]";
  }
  if (sends.tellp() > 0) {
    out << (out.tellp() > 0 ? "; " : "") << "rank(s) [" << sends.str() << "] did not take our data";
  }
  return out.str();
}

void UcxTransport::cancelPending() {
  // Cancelled receives complete on a later progress call; wait for that so
  // UCX never writes into a buffer the caller is about to free.
  for (const auto& op : pending_) {
    ucp_request_cancel(worker_.handle(), op.request);
  }
  auto giveUp = Clock::now() + std::chrono::seconds(1);
  while (!pending_.empty()) {
    worker_.progress();
    std::erase_if(pending_, [&](const PendingOperation& op) {
      if (ucp_request_check_status(op.request) == UCS_INPROGRESS && Clock::now() < giveUp) {
        return false;
      }
      ucp_request_free(op.request);
      return true;
    });
  }
}

void UcxTransport::waitAll(const Deadline& deadline, const std::string& operation) {
  const auto spin = std::chrono::microseconds(config().spinMicroseconds);
  auto spinUntil = Clock::now() + spin;
  std::string failure;
  bool mismatch = false;
  while (failure.empty() && !pending_.empty()) {
    if (aborted_.load(std::memory_order_relaxed)) {
      cancelPending();
      throw AbortedError(operation + " was aborted because the process group is shutting down or failed");
    }
    if (worker_.aborted()) {
      cancelPending();
      throw AbortedError(operation + " was aborted because the process is exiting");
    }
    unsigned events = worker_.progress();
    std::size_t finished = reapCompleted(failure, mismatch);
    if (!failure.empty() || pending_.empty()) {
      break;
    }
    if (deadline.expired()) {
      std::string who = describePending();
      cancelPending();
      throw TimeoutError(operation + " timed out: " + who);
    }
    if (events > 0 || finished > 0) {
      spinUntil = Clock::now() + spin;
      continue;
    }
    if (Clock::now() < spinUntil) {
      continue;
    }
    worker_.waitForActivity(deadline.millisecondsLeft(kMaxSleepMs));
    spinUntil = Clock::now() + spin;
  }
  if (!failure.empty()) {
    cancelPending();
    if (mismatch) {
      throw MismatchError(operation + ": " + failure);
    }
    throw Error(operation + ": " + failure);
  }
}

void UcxTransport::abort() {
  aborted_.store(true, std::memory_order_relaxed);
  worker_.interrupt();
}

}  // namespace ucxcoll
