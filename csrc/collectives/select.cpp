// Algorithm choice. Latency-bound (small) messages take the one-round
// direct exchanges; bandwidth-bound (large) ones take the rings. The
// UCXCOLL_*_ALGO variables force a choice, for benchmarks and tests; they
// are checked once, when the first group is set up.

#include <stdexcept>

#include "collectives/collective.hpp"
#include "common/config.hpp"

namespace ucxcoll {
namespace {

void checkChoice(const char* variable, const std::string& value, std::initializer_list<const char*> choices) {
  std::string list;
  for (const char* choice : choices) {
    if (value == choice) {
      return;
    }
    list += (list.empty() ? "" : ", ") + std::string(choice);
  }
  throw std::invalid_argument(std::string(variable) + "=" + value + " is not an algorithm; use one of " + list);
}

bool small(std::size_t bytes) {
  return bytes <= config().smallMessageBytes;
}

}  // namespace

void validateAlgorithmChoices() {
  checkChoice("UCXCOLL_ALLGATHER_ALGO", config().allgatherAlgorithm, {"auto", "direct", "ring"});
  checkChoice("UCXCOLL_ALLREDUCE_ALGO", config().allreduceAlgorithm, {"auto", "direct", "ring"});
  checkChoice("UCXCOLL_BCAST_ALGO", config().broadcastAlgorithm, {"auto", "binomial"});
}

Task selectAllgather(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  const std::string& forced = config().allgatherAlgorithm;
  if (forced == "direct" || (forced == "auto" && small(bytes))) {
    return allgatherDirect(c, input, outputs, bytes);
  }
  return allgatherRing(c, input, outputs, bytes);
}

Task selectBroadcast(Collective& c, void* buffer, std::size_t bytes, int root) {
  return broadcastBinomial(c, buffer, bytes, root);
}

Task selectAllreduce(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  const std::string& forced = config().allreduceAlgorithm;
  if (forced == "direct" || (forced == "auto" && small(count * elementSize(type)))) {
    return allreduceDirect(c, buffer, count, type, reduction);
  }
  return allreduceRing(c, buffer, count, type, reduction);
}

Task selectBarrier(Collective& c) {
  return barrierDissemination(c);
}

}  // namespace ucxcoll
