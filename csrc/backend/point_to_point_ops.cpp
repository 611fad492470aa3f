// Point-to-point operations of UcxBackend: send, recv and recv from any
// rank. Each is one PointToPoint transfer, started at once (if no other
// thread is driving the engine, on the caller's thread), so that it never
// waits for the group's collectives or for other transfers.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "backend/future_completer.hpp"
#include "backend/tensor_checks.hpp"
#include "backend/ucx_backend.hpp"

namespace ucxcoll {
namespace {

// A transfer that owns its tensors: the user's, and the contiguous copy it
// sends from or receives into when the user's is not contiguous.
class TensorTransfer final : public PointToPoint {
 public:
  TensorTransfer(Direction direction, std::shared_ptr<Group> group, int peer, int userTag, at::Tensor tensor,
                 uint64_t number, std::chrono::milliseconds timeout)
      : TensorTransfer(direction, std::move(group), peer, userTag, tensor,
                       tensor.is_contiguous() ? tensor : tensor.contiguous(), number, timeout) {}

  void reportTo(c10::intrusive_ptr<UcxWork> work) { work_ = std::move(work); }

 protected:
  void received() override {
    if (!buffer_.is_same(tensor_)) {
      tensor_.copy_(buffer_);
    }
    if (work_) {
      work_->setSourceRank(sourceRank());  // before the Work completes
    }
  }

 private:
  TensorTransfer(Direction direction, std::shared_ptr<Group> group, int peer, int userTag, at::Tensor tensor,
                 at::Tensor buffer, uint64_t number, std::chrono::milliseconds timeout)
      : PointToPoint(direction, std::move(group), peer, static_cast<uint64_t>(userTag), buffer.data_ptr(),
                     buffer.nbytes(), number, timeout),
        tensor_(std::move(tensor)),
        buffer_(std::move(buffer)) {}

  at::Tensor tensor_;
  at::Tensor buffer_;
  c10::intrusive_ptr<UcxWork> work_;
};

}  // namespace

template <typename MakeTransfer>
c10::intrusive_ptr<c10d::Work> UcxBackend::runTransfer(c10d::OpType opType, const char* opName, c10::IValue result,
                                                       int peer, MakeTransfer make) {
  engine_->destroyRetired();  // before any lock: may free tensors
  FutureCompleter::instance().destroyRetired();
  std::shared_ptr<Group> group;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    checkUsable(*group_, opName);
    TORCH_CHECK(!closed_, "ucxcoll: ", opName, " called on a process group that was shut down");
    group = group_;
  }
  uint64_t number = transfers_.fetch_add(1);
  const std::chrono::milliseconds timeout = timeout_.load();
  FlightRecording::Ticket entry;
  if (flightRecording_->active()) {
    const auto tensors = tensorsIn(result);
    entry = flightRecording_->record(opType, opName, tensors, tensors, timeout, peer);
  }
  std::unique_ptr<TensorTransfer> op = make(std::move(group), number, timeout);
  auto work = makeWork(*op, opType, opName, std::move(result), tensorListType(), number, entry);
  op->reportTo(work);
  // Started right away when possible; waiting on the Work then drives.
  [[maybe_unused]] Engine::Lease none = engine_->submit(std::move(op));
  return work;
}

c10::intrusive_ptr<c10d::Work> UcxBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  const char* op = "send";
  checkSingleTensor(op, tensors, "tensor");
  checkPeer(op, dstRank, size_, "destination");
  checkTag(op, tag);
  at::Tensor tensor = tensors[0];
  return runTransfer(c10d::OpType::SEND, op, c10::IValue(tensors), dstRank,
                     [&](std::shared_ptr<Group> group, uint64_t number, auto timeout) {
                       return std::make_unique<TensorTransfer>(PointToPoint::Direction::Send, std::move(group), dstRank,
                                                               tag, tensor, number, timeout);
                     });
}

c10::intrusive_ptr<c10d::Work> UcxBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  const char* op = "recv";
  checkSingleTensor(op, tensors, "tensor");
  checkPeer(op, srcRank, size_, "source");
  checkTag(op, tag);
  at::Tensor tensor = tensors[0];
  return runTransfer(c10d::OpType::RECV, op, c10::IValue(tensors), srcRank,
                     [&](std::shared_ptr<Group> group, uint64_t number, auto timeout) {
                       return std::make_unique<TensorTransfer>(PointToPoint::Direction::Receive, std::move(group),
                                                               srcRank, tag, tensor, number, timeout);
                     });
}

c10::intrusive_ptr<c10d::Work> UcxBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  const char* op = "recv";
  checkSingleTensor(op, tensors, "tensor");
  checkTag(op, tag);
  at::Tensor tensor = tensors[0];
  return runTransfer(c10d::OpType::RECVANYSOURCE, op, c10::IValue(tensors), -1,
                     [&](std::shared_ptr<Group> group, uint64_t number, auto timeout) {
                       return std::make_unique<TensorTransfer>(PointToPoint::Direction::Receive, std::move(group),
                                                               PointToPoint::kAnySource, tag, tensor, number, timeout);
                     });
}

}  // namespace ucxcoll
