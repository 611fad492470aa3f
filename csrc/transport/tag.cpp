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
  switch (routine) {
    case Routine::AllgatherDirect:
    case Routine::AllgatherRing:
      return "all_gather";
    case Routine::AllreduceDirect:
    case Routine::AllreduceRing:
      return "all_reduce";
    case Routine::BroadcastBinomial:
      return "broadcast";
    case Routine::BarrierDissemination:
      return "barrier";
  }
  return "unknown collective";
}

const char* algorithmName(Routine routine) {
  switch (routine) {
    case Routine::AllgatherDirect:
    case Routine::AllreduceDirect:
      return "direct";
    case Routine::AllgatherRing:
    case Routine::AllreduceRing:
      return "ring";
    case Routine::BroadcastBinomial:
      return "binomial";
    case Routine::BarrierDissemination:
      return "dissemination";
  }
  return "unknown";
}

Detail detailOf(Routine routine) {
  switch (routine) {
    case Routine::BroadcastBinomial:
      return Detail::Root;
    case Routine::AllreduceDirect:
    case Routine::AllreduceRing:
      return Detail::Reduction;
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

uint64_t CollectiveLayout::make(uint32_t channel, Routine routine, uint64_t sequence, uint32_t slot) const {
  if (slot >> slotBits() != 0) {
    throw std::out_of_range("tag: slot " + std::to_string(slot) + " does not fit in " + std::to_string(slotBits()) +
                            " bits");
  }
  const uint64_t sequenceMask = (uint64_t{1} << sequenceBits()) - 1;
  return channelBits(Kind::Collective, channel) | ((static_cast<uint64_t>(routine) & kRoutineMask) << kRoutineShift) |
         ((sequence & sequenceMask) << slotBits()) | slot;
}

uint32_t CollectiveLayout::slotFor(Routine routine, uint32_t detail, uint32_t rest) const {
  const Detail kind = detailOf(routine);
  const uint32_t restBits = kind == Detail::Root ? kRoundBits : kind == Detail::Reduction ? rankBits_ + 1 : slotBits();
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
  return (tag >> slotBits()) & ((uint64_t{1} << sequenceBits()) - 1);
}

uint32_t CollectiveLayout::slot(uint64_t tag) const {
  return static_cast<uint32_t>(tag & ((uint64_t{1} << slotBits()) - 1));
}

uint32_t CollectiveLayout::detail(uint64_t tag) const {
  switch (detailOf(routine(tag))) {
    case Detail::Root:
      return slot(tag) >> kRoundBits;
    case Detail::Reduction:
      return slot(tag) >> (rankBits_ + 1);
    case Detail::None:
      break;
  }
  return 0;
}

uint64_t CollectiveLayout::detailMask(Routine routine) const {
  const uint64_t slotMask = (uint64_t{1} << slotBits()) - 1;
  switch (detailOf(routine)) {
    case Detail::Root:
      return slotMask & ~((uint64_t{1} << kRoundBits) - 1);
    case Detail::Reduction:
      return slotMask & ~((uint64_t{1} << (rankBits_ + 1)) - 1);
    case Detail::None:
      break;
  }
  return 0;
}

uint64_t CollectiveLayout::sameCollectiveMask() const {
  return kChannelFieldsMask | (((uint64_t{1} << sequenceBits()) - 1) << slotBits());
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
  return channelBits(Kind::Internal, channel) | (uint64_t{purpose} << 42) | (uint64_t{value} << kSenderBits) | sender;
}

}  // namespace ucxcoll::tag
