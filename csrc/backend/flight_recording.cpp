#include "backend/flight_recording.hpp"

#if __has_include(<nlohmann/json.hpp>) && __has_include(<torch/csrc/distributed/c10d/hooks/FlightRecorderHook.hpp>)
#define UCXCOLL_RECORDS_FLIGHT 1
#include <torch/csrc/distributed/c10d/FlightRecorderDetail.hpp>
#include <torch/csrc/distributed/c10d/Utils.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#else
#define UCXCOLL_RECORDS_FLIGHT 0
#endif

#include <atomic>

#include "common/logging.hpp"

namespace ucxcoll {

#if UCXCOLL_RECORDS_FLIGHT
namespace {

// The operation names of torch's trace analyzer (its COLLECTIVES and P2P
// lists), which rejects an entry it cannot name. `opName`, the backend's
// own name, where the type does not say which operation it was (COALESCED:
// all_gather_into_tensor_coalesced, reduce_scatter_tensor_coalesced).
const char* analyzerName(c10d::OpType opType, const char* opName) {
  switch (opType) {
    case c10d::OpType::BROADCAST:
      return "broadcast";
    case c10d::OpType::ALLREDUCE:
      return "all_reduce";
    case c10d::OpType::ALLREDUCE_COALESCED:
      return "allreduce_coalesced";
    case c10d::OpType::REDUCE:
      return "reduce";
    case c10d::OpType::ALLGATHER:
      return "all_gather";
    case c10d::OpType::_ALLGATHER_BASE:
      return "_all_gather_base";
    case c10d::OpType::ALLGATHER_COALESCED:
      return "allgather_coalesced";
    case c10d::OpType::GATHER:
      return "gather";
    case c10d::OpType::SCATTER:
      return "scatter";
    case c10d::OpType::REDUCE_SCATTER:
      return "reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE:
      return "_reduce_scatter_base";
    case c10d::OpType::ALLTOALL_BASE:
      return "all_to_all_single";
    case c10d::OpType::ALLTOALL:
      return "all_to_all";
    case c10d::OpType::SEND:
      return "send";
    case c10d::OpType::RECV:
    case c10d::OpType::RECVANYSOURCE:
      return "recv";
    case c10d::OpType::BARRIER:
      return "barrier";
    case c10d::OpType::COALESCED:
      return opName;
    default:
      return "unknown";
  }
}

bool isPointToPoint(c10d::OpType opType) {
  return opType == c10d::OpType::SEND || opType == c10d::OpType::RECV || opType == c10d::OpType::RECVANYSOURCE;
}

c10d::FlightRecorder<c10::Event>* recorder() {
  // The instance dumps read with backend="ucxcoll"; getFlightRecorder is
  // the registry in libtorch, not a private copy of the template's static.
  static c10d::FlightRecorder<c10::Event>* instance = c10d::getFlightRecorder("ucxcoll");
  return instance;
}

// Process-wide, like the ids the built-in backends give their groups.
std::atomic<size_t> nextGroupId{0};

}  // namespace
#endif

bool FlightRecording::recordsNatively() {
  return UCXCOLL_RECORDS_FLIGHT != 0;
}

#if UCXCOLL_RECORDS_FLIGHT

FlightRecording::~FlightRecording() = default;

void FlightRecording::start(std::string groupName, std::string groupDescription, std::vector<uint64_t> globalRanks) {
  // Once per group, even if two threads ask at once (torch calls it with
  // the GIL held, but nothing here depends on that).
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_.load() || !recorder()->enabled_) {
    return;
  }
  groupId_ = nextGroupId++;
  name_ = std::make_tuple(std::move(groupName), std::move(groupDescription));
  status_ = std::make_shared<c10d::ProcessGroupStatus>();
  // A mapping we do not have is not published: made-up global ranks would
  // put several processes' dumps in one file.
  if (static_cast<size_t>(rank_) < globalRanks.size()) {
    recorder()->setRank(static_cast<int>(globalRanks[static_cast<size_t>(rank_)]));
    recorder()->record_pg_ranks(name_, std::move(globalRanks));
  }
  started_.store(true, std::memory_order_release);
}

bool FlightRecording::active() const {
  return started_.load(std::memory_order_acquire) && recorder()->enabled_;
}

FlightRecording::Ticket FlightRecording::record(c10d::OpType opType, const char* opName,
                                                const std::vector<at::Tensor>& inputs,
                                                const std::vector<at::Tensor>& outputs,
                                                std::chrono::milliseconds timeout, int peer) {
  if (!active()) {
    return {};
  }
  const bool pointToPoint = isPointToPoint(opType);
  const char* operation = analyzerName(opType, opName);
  int64_t collectiveSequence = 0;
  int64_t transferSequence = 0;
  int64_t sequence = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    collectiveSequence = pointToPoint ? collectives_ : ++collectives_;
    transferSequence = pointToPoint ? ++transfers_ : transfers_;
    sequence = operations_++;
    status_->lastEnqueuedSeq = sequence;
    status_->lastEnqueuedWorkName = operation;
  }
  std::string profilingName = std::string("ucxcoll:") + operation;
  if (opType == c10d::OpType::SEND) {
    profilingName += " " + std::to_string(rank_) + "->" + std::to_string(peer);
  } else if (pointToPoint) {
    profilingName += " " + std::to_string(rank_) + "<-" + (peer < 0 ? std::string("?") : std::to_string(peer));
  }
  // Not under mutex_: gathering the traceback takes the GIL.
  auto entry = recorder()->recordWithResetEnabled(groupId_, name_, static_cast<size_t>(collectiveSequence),
                                                  static_cast<size_t>(transferSequence), static_cast<size_t>(sequence),
                                                  std::move(profilingName), inputs.empty() ? outputs : inputs, outputs,
                                                  /*start=*/nullptr, /*end=*/nullptr, timeout, status_, pointToPoint);
  return Ticket{entry.id, entry.reset_epoch, sequence, operation};
}

void FlightRecording::retire(const Ticket& ticket, float durationMs) {
  if (!ticket.id) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status_->lastCompletedSeq = ticket.sequence;
    status_->lastCompletedWorkName = ticket.name;
  }
  recorder()->retire_completed(ticket.id, ticket.epoch, durationMs);
}

void FlightRecording::dumpAfterFailure() {
  static const bool dumpOnFailure = c10d::getCvarBool(c10d::TORCH_FR_DUMP_ON_TIMEOUT, true);
  static std::atomic<bool> dumped{false};
  if (!dumpOnFailure || !active() || dumped.exchange(true)) {
    return;  // once per process: every later dump would overwrite the one nearest the failure
  }
  const bool stackTraces = c10d::getCvarBool(c10d::TORCH_INCLUDE_STACK_TRACE, true);
  const bool onlyActive = c10d::getCvarBool(c10d::TORCH_INCLUDE_ONLY_ACTIVE, false);
  // Here, on the future thread that runs the abort hooks, not on a thread
  // of its own: symbolizing the stack traces takes the GIL, and a thread
  // of our own could still ask for it while the interpreter finalizes
  // (which aborts the process); the future thread is stopped before that.
  try {
    if (!c10d::try_dump_fr_trace_file(true, stackTraces, onlyActive, "ucxcoll")) {
      UCXCOLL_WARN("flight recorder: no trace to dump (no global rank known for this process)");
    }
  } catch (const std::exception& error) {
    UCXCOLL_WARN("flight recorder: dumping the trace failed: " << error.what());
  }
}

#else  // torch without the recorder registry, or no nlohmann/json headers

FlightRecording::~FlightRecording() = default;
void FlightRecording::start(std::string, std::string, std::vector<uint64_t>) {}
bool FlightRecording::active() const {
  return false;
}
FlightRecording::Ticket FlightRecording::record(c10d::OpType, const char*, const std::vector<at::Tensor>&,
                                                const std::vector<at::Tensor>&, std::chrono::milliseconds, int) {
  return {};
}
void FlightRecording::retire(const Ticket&, float) {}
void FlightRecording::dumpAfterFailure() {}

#endif

}  // namespace ucxcoll
