#pragma once
// One run of one collective on one group: the transport, who we are, the
// tag fields that are fixed for this run, and its deadline. Algorithms post
// sends and receives through it by (peer, step) and never build tags.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "collectives/datatype.hpp"
#include "common/deadline.hpp"
#include "transport/transport.hpp"

namespace ucxcoll {

// Scratch memory for algorithms, kept by a group between collectives so
// that large ones do not allocate (and page-fault) a fresh buffer each time.
// Its contents are unspecified whenever it is handed out.
class Workspace {
 public:
  std::byte* get(std::size_t bytes);

 private:
  std::unique_ptr<std::byte[]> buffer_;
  std::size_t capacity_ = 0;
};

class Collective {
 public:
  // `name` is used in error messages, e.g. "all_gather #12 on group 3".
  // Without a `workspace` the collective uses scratch memory of its own.
  Collective(Transport& transport, uint32_t groupId, uint32_t sequence, Deadline deadline, std::string name,
             Workspace* workspace = nullptr);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  void send(int peer, uint32_t step, const void* data, std::size_t bytes);
  void recv(int peer, uint32_t step, void* data, std::size_t bytes);
  // Wait for everything posted so far (see Transport::waitAll).
  void wait();

  // At least `bytes` of scratch memory, valid until the next call.
  std::byte* scratch(std::size_t bytes) { return workspace_->get(bytes); }

 private:
  Transport& transport_;
  int rank_;
  int size_;
  uint32_t groupId_;
  uint32_t sequence_;
  Deadline deadline_;
  std::string name_;
  Workspace ownWorkspace_;
  Workspace* workspace_;
};

// Copy that tolerates the same or overlapping buffers (in-place collectives
// pass an input that is a view of the output).
void copyBytes(void* destination, const void* source, std::size_t bytes);

// ---- Algorithms: one per file, selected by size in select.cpp ------------

// All-gather: every rank contributes `bytes` from `input`; afterwards
// outputs[r] holds rank r's contribution on every rank.
void allgatherDirect(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);
void allgatherRing(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);

// Broadcast `bytes` at `buffer` from group rank `root` to all ranks.
void broadcastBinomial(Collective& c, void* buffer, std::size_t bytes, int root);

// All-reduce `count` elements in place.
void allreduceDirect(Collective& c, void* buffer, std::size_t count, DataType type, ReduceOp op);
void allreduceRing(Collective& c, void* buffer, std::size_t count, DataType type, ReduceOp op);

// Returns once every rank has entered.
void barrierDissemination(Collective& c);

// Entry points that pick the algorithm by message and group size (or by the
// UCXCOLL_*_ALGO override).
void allgather(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);
void broadcast(Collective& c, void* buffer, std::size_t bytes, int root);
void allreduce(Collective& c, void* buffer, std::size_t count, DataType type, ReduceOp op);
void barrier(Collective& c);

}  // namespace ucxcoll
