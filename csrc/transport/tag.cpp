#include "transport/tag.hpp"

namespace ucxcoll::tag {
namespace {

constexpr uint64_t kRoutineMask = (uint64_t{1} << kRoutineBits) - 1;

uint64_t channelBits(Kind kind, uint32_t channel) {
  if (channel == 0 || channel > kMaxChannel) {
    throw std::out_of_range("tag: channel " + std::to_string(channel) + " is outside 1.." +
                            std::to_string(kMaxChannel));
  }
  return (static_cast<uint64_t>(kind) << kKindShift) | (uint64_t{channel} << kChannelShift);
}

void checkSender(uint32_t sender) {
  if (sender >= kMaxGroupSize) {
    throw std::out_of_range("tag: sender rank " + std::to_string(sender) + " does not fit in " +
                            std::to_string(kSenderBits) + " bits");
  }
}

}  // namespace

const char* collectiveName(Routine routine) {
  if (isPhase(routine)) {
    return collectiveName(innerOf(routine));
  }
  switch (routine) {
    case Routine::AllgatherDirect:
    case Routine::AllgatherRing:
    case Routine::AllgatherChunkedRing:
    case Routine::AllgatherHierarchical:
      return "all_gather";
    case Routine::AllreduceDirect:
    case Routine::AllreduceRing:
    case Routine::AllreduceRecursiveDoubling:
    case Routine::AllreduceHierarchical:
      return "all_reduce";
    case Routine::BroadcastBinomial:
    case Routine::BroadcastPipelined:
    case Routine::BroadcastHierarchical:
      return "broadcast";
    case Routine::BarrierDissemination:
      return "barrier";
    case Routine::ReduceDirect:
    case Routine::ReduceHierarchical:
      return "reduce";
    case Routine::ReduceScatterPairwise:
    case Routine::ReduceScatterStagedPair:
    case Routine::ReduceScatterRing:
    case Routine::ReduceScatterHierarchical:
      return "reduce_scatter";
    case Routine::AlltoallPairwise:
    case Routine::AlltoallStaged:
    case Routine::AlltoallHierarchical:
      return "all_to_all";
    case Routine::AllgatherUneven:
      return "all_gather (uneven)";
    case Routine::GatherDirect:
      return "gather";
    case Routine::ScatterDirect:
      return "scatter";
    case Routine::BarrierMonitored:
      return "monitored_barrier";
  }
  return "unknown collective";
}

const char* algorithmName(Routine routine) {
  if (isPhase(routine)) {
    return algorithmName(innerOf(routine));
  }
  switch (routine) {
    case Routine::AllgatherDirect:
    case Routine::AllreduceDirect:
    case Routine::ReduceDirect:
    case Routine::GatherDirect:
    case Routine::ScatterDirect:
    case Routine::AllgatherUneven:
      return "direct";
    case Routine::ReduceScatterPairwise:
    case Routine::AlltoallPairwise:
      return "pairwise";
    case Routine::BarrierMonitored:
      return "monitored";
    case Routine::AllgatherRing:
    case Routine::AllreduceRing:
    case Routine::ReduceScatterRing:
      return "ring";
    case Routine::BroadcastBinomial:
      return "binomial";
    case Routine::BroadcastPipelined:
      return "pipelined chain";
    case Routine::AllgatherChunkedRing:
      return "chunked ring";
    case Routine::ReduceScatterStagedPair:
      return "staged pair";
    case Routine::AlltoallStaged:
      return "staged pairwise";
    case Routine::BarrierDissemination:
      return "dissemination";
    case Routine::AllreduceRecursiveDoubling:
      return "recursive doubling";
    case Routine::AllreduceHierarchical:
    case Routine::ReduceScatterHierarchical:
    case Routine::AllgatherHierarchical:
    case Routine::BroadcastHierarchical:
    case Routine::ReduceHierarchical:
    case Routine::AlltoallHierarchical:
      return "hierarchical";
  }
  return "unknown";
}

Detail detailOf(Routine routine) {
  if (isPhase(routine)) {
    return detailOf(innerOf(routine));
  }
  switch (routine) {
    case Routine::BroadcastBinomial:
    case Routine::BroadcastPipelined:
    case Routine::BroadcastHierarchical:
    case Routine::GatherDirect:
    case Routine::ScatterDirect:
      return Detail::Root;
    case Routine::AllreduceDirect:
    case Routine::AllreduceRing:
    case Routine::AllreduceRecursiveDoubling:
    case Routine::AllreduceHierarchical:
    case Routine::ReduceScatterPairwise:
    case Routine::ReduceScatterStagedPair:
    case Routine::ReduceScatterRing:
    case Routine::ReduceScatterHierarchical:
      return Detail::Reduction;
    case Routine::ReduceDirect:
    case Routine::ReduceHierarchical:
      return Detail::RootAndReduction;
    default:
      return Detail::None;
  }
}

CollectiveLayout::CollectiveLayout(uint32_t groupSize) : rankBits_(bitsFor(groupSize)) {
  if (groupSize == 0 || groupSize > kMaxGroupSize) {
    throw std::out_of_range("tag: groups of 1 to " + std::to_string(kMaxGroupSize) + " ranks are supported, got " +
                            std::to_string(groupSize));
  }
}

uint64_t CollectiveLayout::make(uint32_t channel, Routine routine, uint64_t sequence, uint32_t slot,
                                uint32_t sender) const {
  if (slot >> slotBits() != 0) {
    throw std::out_of_range("tag: slot " + std::to_string(slot) + " does not fit in " + std::to_string(slotBits()) +
                            " bits");
  }
  if (sender >> rankBits_ != 0) {
    throw std::out_of_range("tag: sender " + std::to_string(sender) + " does not fit in " + std::to_string(rankBits_) +
                            " bits");
  }
  const uint64_t sequenceMask = (uint64_t{1} << sequenceBits()) - 1;
  return channelBits(Kind::Collective, channel) | ((static_cast<uint64_t>(routine) & kRoutineMask) << kRoutineShift) |
         ((sequence & sequenceMask) << (slotBits() + rankBits_)) | (uint64_t{slot} << rankBits_) | sender;
}

uint32_t CollectiveLayout::slotFor(Routine routine, uint32_t detail, uint32_t rest) const {
  const Detail kind = detailOf(routine);
  const uint32_t restBits = restBitsOf(kind);
  const uint32_t detailBits = slotBits() - restBits;
  if (rest >> restBits != 0 || (detailBits < 32 && detail >> detailBits != 0) ||
      (kind == Detail::None && detail != 0)) {
    throw std::out_of_range("tag: " + std::string(collectiveName(routine)) + " slot detail " + std::to_string(detail) +
                            " / part " + std::to_string(rest) + " does not fit the slot");
  }
  return (detail << restBits) | rest;
}

Routine CollectiveLayout::routine(uint64_t tag) const {
  return static_cast<Routine>((tag >> kRoutineShift) & kRoutineMask);
}

uint64_t CollectiveLayout::sequence(uint64_t tag) const {
  return (tag >> (slotBits() + rankBits_)) & ((uint64_t{1} << sequenceBits()) - 1);
}

uint32_t CollectiveLayout::slot(uint64_t tag) const {
  return static_cast<uint32_t>((tag >> rankBits_) & ((uint64_t{1} << slotBits()) - 1));
}

uint32_t CollectiveLayout::sender(uint64_t tag) const {
  return static_cast<uint32_t>(tag & ((uint64_t{1} << rankBits_) - 1));
}

uint32_t CollectiveLayout::restBitsOf(Detail kind) const {
  switch (kind) {
    case Detail::Root:
      return kRoundBits;
    case Detail::Reduction:
      return rankBits_ + 1;
    case Detail::RootAndReduction:
      return 1;
    case Detail::None:
      break;
  }
  return slotBits();
}

uint32_t CollectiveLayout::detail(uint64_t tag) const {
  const Detail kind = detailOf(routine(tag));
  return kind == Detail::None ? 0 : slot(tag) >> restBitsOf(kind);
}

uint64_t CollectiveLayout::detailMask(Routine routine) const {
  const Detail kind = detailOf(routine);
  const uint64_t slotMask = (uint64_t{1} << slotBits()) - 1;
  return kind == Detail::None ? 0 : (slotMask & ~((uint64_t{1} << restBitsOf(kind)) - 1)) << rankBits_;
}

uint64_t CollectiveLayout::sameCollectiveMask() const {
  return kChannelFieldsMask | (((uint64_t{1} << sequenceBits()) - 1) << (slotBits() + rankBits_));
}

uint64_t pointToPoint(uint32_t channel, uint64_t userTag, uint32_t sender) {
  if (userTag > kMaxUserTag) {
    throw std::out_of_range("tag: point-to-point tag " + std::to_string(userTag) + " is outside 0.." +
                            std::to_string(kMaxUserTag));
  }
  checkSender(sender);
  return channelBits(Kind::PointToPoint, channel) | (userTag << kSenderBits) | sender;
}

uint64_t internal(uint32_t channel, uint32_t purpose, uint32_t value, uint32_t sender) {
  if (purpose > kMaxPurpose || value > kMaxInternalValue) {
    throw std::out_of_range("tag: internal purpose " + std::to_string(purpose) + " / value " + std::to_string(value) +
                            " out of range");
  }
  checkSender(sender);
  return channelBits(Kind::Internal, channel) | (uint64_t{purpose} << kPurposeShift) |
         (uint64_t{value} << kSenderBits) | sender;
}

}  // namespace ucxcoll::tag
