#pragma once
// ucxcoll's entries in torch's flight recorder, written by the backend
// itself (as ProcessGroupGloo does) rather than by the FlightRecorderHook
// torch 2.15 attaches to backends that do not record. The hook adds two
// hook dispatches, a map of operations in flight and a completion lookup
// to each call; recording here is one entry at submission and one
// retirement on success: an 8-byte all_reduce at 2 ranks takes about 1 us
// less (docs/BENCHMARKS.md, 2026-12-07).
//
// What an entry says is what the hook would have said, so that dumps and
// torch's trace analyzer read the same: "ucxcoll:<operation>" with the
// analyzer's operation names, "send 0->1" / "recv 1<-0" / "recv 1<-?" for
// point-to-point, collective and point-to-point sequence numbers counted
// separately from 1, the group's (name, description), its global ranks,
// and the operation's timeout. An entry is retired (state "completed",
// with the duration) when the operation succeeds; a failed or timed-out
// one stays "scheduled", which is what tells a hang from a finished op.
//
// torch's recorder headers need nlohmann/json and the recorder registry of
// torch 2.15 (getFlightRecorder); where either is missing this compiles to
// nothing, recordsNatively() says so, and torch's hook records instead.

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace c10d {
struct ProcessGroupStatus;
}

namespace ucxcoll {

class FlightRecording {
 public:
  // Whether this build can write the entries itself (ucxcoll's Python
  // side then calls start() for a group instead of attaching torch's hook).
  static bool recordsNatively();

  explicit FlightRecording(int rank) : rank_(rank) {}
  ~FlightRecording();
  FlightRecording(const FlightRecording&) = delete;
  FlightRecording& operator=(const FlightRecording&) = delete;

  // Records from now on, under the group's name and description (known
  // only once torch has named the group, after the backend is made);
  // `globalRanks`: the default group's ranks of the members, by group rank.
  // Not called where torch's hook records the group instead (a group whose
  // CUDA tensors go to NCCL: the hook records those too, which ucxcoll
  // cannot retire at completion).
  void start(std::string groupName, std::string groupDescription, std::vector<uint64_t> globalRanks);

  // An entry in the recorder, to retire once its operation succeeded.
  struct Ticket {
    std::optional<size_t> id;
    std::optional<size_t> epoch;
    int64_t sequence = 0;
    const char* name = nullptr;
  };

  // Whether record() writes an entry (started, and the recorder is on).
  bool active() const;
  // Records an operation about to be submitted; `opName` is the backend's
  // name for it (a string literal: the ticket may keep it). `peer`: the
  // other rank of a send or receive (-1 for a receive from any rank).
  // Nothing (an empty ticket) while recording is off.
  Ticket record(c10d::OpType opType, const char* opName, const std::vector<at::Tensor>& inputs,
                const std::vector<at::Tensor>& outputs, std::chrono::milliseconds timeout, int peer = -1);
  // Marks the entry completed, with the operation's duration.
  void retire(const Ticket& ticket, float durationMs);

  // The group failed: write the trace to the dump file, once per process,
  // as torch's hook does on an abort (TORCH_FR_DUMP_ON_TIMEOUT, on unless
  // set to 0). Called on a future thread, never the engine's driver.
  void dumpAfterFailure();

 private:
  int rank_;
  std::atomic<bool> started_{false};
  size_t groupId_ = 0;
  std::tuple<std::string, std::string> name_;  // set before started_
  std::mutex mutex_;                           // sequence numbers and the group's status
  int64_t collectives_ = 0;
  int64_t transfers_ = 0;
  int64_t operations_ = 0;
  std::shared_ptr<c10d::ProcessGroupStatus> status_;
};

}  // namespace ucxcoll
