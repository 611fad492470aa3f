// Algorithm choice. Latency-bound (small) messages take the one-round
// direct exchanges; bandwidth-bound (large) ones take the rings. The
// UCXCOLL_*_ALGO variables force a choice, for benchmarks and tests.

#include <stdexcept>

#include "collectives/collective.hpp"
#include "common/config.hpp"

namespace ucxcoll {
namespace {

[[noreturn]] void unknownAlgorithm(const char* variable, const std::string& value, const char* choices) {
  throw std::invalid_argument(std::string(variable) + "=" + value + " is not an algorithm; use one of " + choices);
}

}  // namespace

void allgather(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  const std::string& forced = config().allgatherAlgorithm;
  if (c.size() == 1) {
    copyBytes(outputs[0], input, bytes);
  } else if (forced == "direct" || (forced == "auto" && bytes <= config().smallMessageBytes)) {
    allgatherDirect(c, input, outputs, bytes);
  } else if (forced == "ring" || forced == "auto") {
    allgatherRing(c, input, outputs, bytes);
  } else {
    unknownAlgorithm("UCXCOLL_ALLGATHER_ALGO", forced, "auto, direct, ring");
  }
}

void broadcast(Collective& c, void* buffer, std::size_t bytes, int root) {
  const std::string& forced = config().broadcastAlgorithm;
  if (forced != "auto" && forced != "binomial") {
    unknownAlgorithm("UCXCOLL_BCAST_ALGO", forced, "auto, binomial");
  }
  if (c.size() > 1) {
    broadcastBinomial(c, buffer, bytes, root);
  }
}

void allreduce(Collective& c, void* buffer, std::size_t count, DataType type, ReduceOp op) {
  const std::string& forced = config().allreduceAlgorithm;
  const std::size_t bytes = count * elementSize(type);
  if (c.size() == 1) {
    return;
  } else if (forced == "direct" || (forced == "auto" && bytes <= config().smallMessageBytes)) {
    allreduceDirect(c, buffer, count, type, op);
  } else if (forced == "ring" || forced == "auto") {
    allreduceRing(c, buffer, count, type, op);
  } else {
    unknownAlgorithm("UCXCOLL_ALLREDUCE_ALGO", forced, "auto, direct, ring");
  }
}

void barrier(Collective& c) {
  if (c.size() > 1) {
    barrierDissemination(c);
  }
}

}  // namespace ucxcoll
