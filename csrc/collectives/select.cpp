// Algorithm choice. Latency-bound (small) messages take the one-round
// direct exchanges; bandwidth-bound (large) ones take the rings. The
// UCXCOLL_*_ALGO variables force a choice, for benchmarks and tests
// (common/config.cpp checks their values).

#include "collectives/collective.hpp"
#include "collectives/staging.hpp"
#include "common/config.hpp"

namespace ucxcoll {
namespace {

bool small(std::size_t bytes) {
  return bytes <= config().smallMessageBytes;
}

}  // namespace

Task selectAllgather(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  const std::string& forced = config().allgatherAlgorithm;
  if (forced == "direct" || (forced == "auto" && small(bytes))) {
    return allgatherDirect(c, input, outputs, bytes);
  }
  if (forced == "chunked" || (forced == "auto" && worthStaging(bytes))) {
    return allgatherChunkedRing(c, input, outputs, bytes);
  }
  return allgatherRing(c, input, outputs, bytes);
}

Task selectBroadcast(Collective& c, void* buffer, std::size_t bytes, int root) {
  // The chain pays a round to connect its links; from the size where
  // staging pays off it is faster than the tree at any group size.
  const std::string& forced = config().broadcastAlgorithm;
  if (forced == "pipelined" || (forced == "auto" && worthStaging(bytes))) {
    return broadcastPipelined(c, buffer, bytes, root);
  }
  return broadcastBinomial(c, buffer, bytes, root);
}

Task selectAllreduce(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  // Across hosts with several ranks on each, past the small messages: the
  // hierarchical composition. Every rank of a group has the same topology,
  // so all choose alike. Forced on a group where it cannot run (one host,
  // one rank per host, hosts with different numbers of ranks), the flat
  // choice stands in.
  const std::string& forced = config().allreduceAlgorithm;
  if (c.group()->topology().hierarchical() &&
      (forced == "hierarchical" || (forced == "auto" && !small(count * elementSize(type))))) {
    return allreduceHierarchical(c, buffer, count, type, reduction);
  }
  return selectFlatAllreduce(c, buffer, count, type, reduction);
}

Task selectFlatAllreduce(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  const std::string& forced = config().allreduceAlgorithm;
  if (forced == "direct" || (forced != "ring" && small(count * elementSize(type)))) {
    return allreduceDirect(c, buffer, count, type, reduction);
  }
  return allreduceRing(c, buffer, count, type, reduction);
}

Task selectAlltoall(Collective& c, std::span<const Block> sends, std::span<const Block> receives) {
  // The staged rounds keep every rank copying in step; where ranks
  // outnumber cores they wait on each other's turns on a core, and the
  // pairwise exchange was 1.3-2.3x faster at 4 ranks on 2 cores (4-64 MiB).
  const std::string& forced = config().alltoallAlgorithm;
  if (forced == "staged" ||
      (forced == "auto" && worthStaging(sends[c.rank()].bytes) && !c.group()->ranksOutnumberCores())) {
    return alltoallStaged(c, sends, receives);
  }
  return alltoallPairwise(c, tag::Routine::AlltoallPairwise, sends, receives, false);
}

Task selectReduceScatter(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                         DataType type, Reduction reduction) {
  // The hierarchical composition only where asked for: on two simulated
  // hosts of 2 ranks with a core each it lost to the flat ring (1 MiB
  // blocks 1.8-2.1 against 1.2-1.35 ms, 64 MiB 106-140 against 85-93 ms):
  // its packing copy costs more than the bytes it keeps off the link.
  if (config().reduceScatterAlgorithm == "hierarchical" && c.group()->topology().hierarchical()) {
    return reduceScatterHierarchical(c, inputs, output, count, type, reduction);
  }
  return selectFlatReduceScatter(c, inputs, output, count, type, reduction);
}

Task selectFlatReduceScatter(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                             DataType type, Reduction reduction) {
  // Two ranks take the pairwise exchange, which stages them as a pair from
  // the staging threshold; more ranks take the ring from there.
  const std::string& forced = config().reduceScatterAlgorithm;
  if (forced == "ring" || (forced != "pairwise" && c.size() > 2 && worthStaging(count * elementSize(type)))) {
    return reduceScatterRing(c, inputs, output, count, type, reduction);
  }
  return reduceScatterPairwise(c, inputs, output, count, type, reduction);
}

Task selectBarrier(Collective& c) {
  return barrierDissemination(c);
}

}  // namespace ucxcoll
