#pragma once
// The one place that defines how a 64-bit UCX tag is laid out.
//
// UCX matches tags per worker, and every group in a process shares one
// worker, so the tag alone must say which group, which operation and which
// message a message belongs to. Three kinds of message share the space:
//
//  collective      | kind | channel | routine | sequence        | slot       | sender   |
//                    2      12        6         39 - 2 rankBits   rankBits + 5  rankBits
//  point-to-point  | kind | channel | user tag                 | sender      |
//                    2      12        34                         16
//  internal        | kind | channel | purpose | value          | sender      |
//                    2      12        8         26               16
//
// kind     collective, user point-to-point or internal; never zero, so a
//          zero tag (an uninitialised one) matches nothing of ours.
// channel  the group as the *receiving* process knows it: every process
//          numbers its live groups itself (Channels below) and tells its
//          peers its number at group setup, so two live groups of one
//          process never share a channel, however many groups the job
//          creates. A sender puts the receiver's channel into the tag.
// routine  which collective and algorithm (all_reduce/ring, broadcast/
//          binomial, ...). It takes part in matching, so a message of one
//          collective can never be received by another.
// sequence the collective's number in its group. Its width depends on the
//          group size (slot and sender need 2 rankBits + 5 bits): 37 bits
//          for 2 ranks, 23 for 256, 7 for 65,536, i.e. 2^23 collectives
//          on one group of up to 256 ranks before it wraps (a wrap is
//          harmless unless two ranks are that many collectives apart).
// slot     tells apart the messages one receiver gets within one
//          collective, and carries the operation's detail where it has one,
//          so that ranks disagreeing about it never match: a rooted routine
//          (broadcast, ...) puts the root in the upper rankBits bits and a
//          round number (< 32) below; a reducing routine (all_reduce, ...)
//          puts the reduction (SUM, MAX, ...) in the upper 4 bits and the
//          rest (the sender's rank, or a phase) in the lower rankBits + 1;
//          a rooted reducing routine (reduce) puts the root in the upper
//          rankBits bits, the reduction in the next 4 and a phase in the
//          lowest bit; the others use the whole slot.
//          Messages with equal tags between two ranks are matched in the
//          order they were sent (UCX keeps MPI's non-overtaking rule), so
//          the chunks of one phase can share a slot.
// sender   the sending group rank: a receive from one rank matches only
//          that rank's messages (in a collective the algorithm names the
//          peer, Collective fills in the field); a point-to-point receive
//          from any source masks it.

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ucxcoll::tag {

enum class Kind : uint64_t { Collective = 1, PointToPoint = 2, Internal = 3 };

inline constexpr int kKindShift = 62;
inline constexpr int kChannelShift = 50;
inline constexpr uint64_t kChannelMask = 0xfff;
// Channel 0 is never handed out.
inline constexpr uint32_t kMaxChannel = 0xfff;

inline constexpr uint32_t kMaxGroupSize = 1u << 16;  // the 16-bit sender field

inline constexpr uint64_t kMatchAll = ~uint64_t{0};

// The kind and channel bits: what every message of one group's collectives
// (or point-to-point operations) to one process has in common.
inline constexpr uint64_t kChannelFieldsMask = (uint64_t{3} << kKindShift) | (kChannelMask << kChannelShift);

// Tag and mask that match every message, of any kind, to the aligned block of
// 2^bits channels starting at `first` (bits = 0: that channel alone). The
// engine drops with them what a channel no group has open has received.
constexpr uint64_t channelBlockTag(uint32_t first) {
  return uint64_t{first} << kChannelShift;
}
constexpr uint64_t channelBlockMask(uint32_t bits) {
  return (kChannelMask & ~((uint64_t{1} << bits) - 1)) << kChannelShift;
}
static_assert(channelBlockMask(0) == (kChannelFieldsMask & ~(uint64_t{3} << kKindShift)));

constexpr Kind kind(uint64_t tag) {
  return static_cast<Kind>(tag >> kKindShift);
}
constexpr uint32_t channel(uint64_t tag) {
  return static_cast<uint32_t>((tag >> kChannelShift) & kChannelMask);
}

// Which collective and which algorithm; part of every collective tag.
enum class Routine : uint8_t {
  AllgatherDirect = 1,
  AllgatherRing = 2,
  AllreduceDirect = 3,
  AllreduceRing = 4,
  BroadcastBinomial = 5,
  BarrierDissemination = 6,
  ReduceDirect = 7,
  ReduceScatterPairwise = 8,
  AlltoallPairwise = 9,
  AllgatherUneven = 10,
  GatherDirect = 11,
  ScatterDirect = 12,
  BarrierMonitored = 13,
  BroadcastPipelined = 14,
  AllgatherChunkedRing = 15,
  ReduceScatterStagedPair = 16,
  AlltoallStaged = 17,
  ReduceScatterRing = 18,
  // Composed routines (see "Phases" below): they send nothing under their
  // own routine, only through their phases. Below 32, as a phase's tag
  // carries one in 5 bits.
  AllreduceHierarchical = 19,
  ReduceScatterHierarchical = 20,
  AllgatherHierarchical = 21,
  BroadcastHierarchical = 22,
  ReduceHierarchical = 23,
  AlltoallHierarchical = 24,
  AllreduceRecursiveDoubling = 25,
};
inline constexpr uint32_t kRoutineBits = 6;
inline constexpr int kRoutineShift = 44;
inline constexpr uint64_t kRoutineFieldMask = ((uint64_t{1} << kRoutineBits) - 1) << kRoutineShift;
inline constexpr Routine kRoutines[] = {Routine::AllgatherDirect,
                                        Routine::AllgatherRing,
                                        Routine::AllreduceDirect,
                                        Routine::AllreduceRing,
                                        Routine::BroadcastBinomial,
                                        Routine::BarrierDissemination,
                                        Routine::ReduceDirect,
                                        Routine::ReduceScatterPairwise,
                                        Routine::AlltoallPairwise,
                                        Routine::AllgatherUneven,
                                        Routine::GatherDirect,
                                        Routine::ScatterDirect,
                                        Routine::BarrierMonitored,
                                        Routine::BroadcastPipelined,
                                        Routine::AllgatherChunkedRing,
                                        Routine::ReduceScatterStagedPair,
                                        Routine::AlltoallStaged,
                                        Routine::ReduceScatterRing,
                                        Routine::AllreduceHierarchical,
                                        Routine::ReduceScatterHierarchical,
                                        Routine::AllgatherHierarchical,
                                        Routine::BroadcastHierarchical,
                                        Routine::ReduceHierarchical,
                                        Routine::AlltoallHierarchical,
                                        Routine::AllreduceRecursiveDoubling};

// ---- Phases of a composed collective ------------------------------------
// A hierarchical algorithm runs existing algorithms one after the other on
// subsets of its group's ranks (rank views, collectives/collective.hpp).
// Their messages carry the inner algorithm's routine with kPhaseBit set, so
// that they never match a message of a routine run by the whole group, and
// in the sequence field phaseSequence(): the composed collective's sequence
// number, the phase's place in it (below 2^kPhaseIndexBits) and the
// composed routine. So ranks that run different compositions, or different
// algorithms in one phase, never match; a message of a later phase that
// arrives early waits for its phase.
inline constexpr uint32_t kPhaseBit = 32;
inline constexpr uint32_t kPhaseIndexBits = 2;
inline constexpr uint32_t kComposedRoutineBits = 5;
inline constexpr uint32_t kMinPhaseNumberBits = 12;
constexpr bool isPhase(Routine routine) {
  return (static_cast<uint32_t>(routine) & kPhaseBit) != 0;
}
constexpr Routine phaseOf(Routine inner) {
  return static_cast<Routine>(static_cast<uint32_t>(inner) | kPhaseBit);
}
constexpr Routine innerOf(Routine routine) {
  return static_cast<Routine>(static_cast<uint32_t>(routine) & ~kPhaseBit);
}
constexpr bool isComposed(Routine routine) {
  return routine == Routine::AllreduceHierarchical || routine == Routine::ReduceScatterHierarchical ||
         routine == Routine::AllgatherHierarchical || routine == Routine::BroadcastHierarchical ||
         routine == Routine::ReduceHierarchical || routine == Routine::AlltoallHierarchical;
}
constexpr uint64_t phaseSequence(uint64_t sequence, uint32_t phase, Routine composed) {
  return (((sequence << kPhaseIndexBits) | phase) << kComposedRoutineBits) | static_cast<uint64_t>(composed);
}
// The phase and composed routine that phaseSequence() put in a sequence
// field.
constexpr uint32_t phaseIndexOf(uint64_t sequenceField) {
  return static_cast<uint32_t>(sequenceField >> kComposedRoutineBits) & ((1u << kPhaseIndexBits) - 1);
}
constexpr Routine composedOf(uint64_t sequenceField) {
  return static_cast<Routine>(sequenceField & ((1u << kComposedRoutineBits) - 1));
}

// "all_reduce", and "ring" for AllreduceRing (a phase's routine: its inner
// algorithm's).
const char* collectiveName(Routine routine);
const char* algorithmName(Routine routine);
// What the slot's upper bits carry for a routine. RootAndReduction (reduce)
// carries both: the root above the reduction, one bit of rest below.
enum class Detail { None, Root, Reduction, RootAndReduction };
Detail detailOf(Routine routine);

// Bits of a round number in a rooted routine's slot, and of the reduction
// in a reducing routine's.
inline constexpr uint32_t kRoundBits = 5;
inline constexpr uint32_t kReductionBits = 4;

// The collective layout for one group size. Every rank of a group builds
// the same one.
class CollectiveLayout {
 public:
  explicit CollectiveLayout(uint32_t groupSize);

  uint32_t rankBits() const { return rankBits_; }
  uint32_t slotBits() const { return rankBits_ + kRoundBits; }
  uint32_t sequenceBits() const { return 64 - 2 - 12 - kRoutineBits - slotBits() - rankBits_; }
  // Whether phase tags (phaseSequence) leave at least kMinPhaseNumberBits
  // of the collective's number: up to 1,024 ranks. Larger groups do not
  // run compositions, whose phase messages would otherwise match those of
  // a collective a few hundred numbers earlier or later.
  bool fitsPhases() const { return sequenceBits() >= kPhaseIndexBits + kComposedRoutineBits + kMinPhaseNumberBits; }

  // Throws std::out_of_range when channel, slot or sender does not fit;
  // the sequence number is taken modulo 2^sequenceBits().
  uint64_t make(uint32_t channel, Routine routine, uint64_t sequence, uint32_t slot, uint32_t sender = 0) const;
  // The slot of a routine with a detail (root or reduction): the detail in
  // the upper bits, `rest` below (a round number for rooted routines, fewer
  // than 32; below 2^(rankBits+1) for reducing ones; 0 or 1 for rooted
  // reducing ones, whose detail is root << 4 | reduction). For routines
  // without a detail, `rest` is the slot.
  uint32_t slotFor(Routine routine, uint32_t detail, uint32_t rest) const;

  Routine routine(uint64_t tag) const;
  uint64_t sequence(uint64_t tag) const;
  uint32_t slot(uint64_t tag) const;
  uint32_t sender(uint64_t tag) const;
  // The root or reduction the tag's slot carries (0 for routines without).
  uint32_t detail(uint64_t tag) const;
  // Mask of the slot's detail bits for `routine` (0 for routines without).
  uint64_t detailMask(Routine routine) const;

  // Kind, channel and sequence: all messages of one collective on one
  // receiver share these bits, whatever their routine, root, slot or
  // sender.
  uint64_t sameCollectiveMask() const;

 private:
  // Bits below the detail in the slot of a routine with this kind of detail.
  uint32_t restBitsOf(Detail kind) const;

  uint32_t rankBits_;
};

// User point-to-point: the user's tag must be in [0, kMaxUserTag].
inline constexpr int kUserTagBits = 34;
inline constexpr uint64_t kMaxUserTag = (uint64_t{1} << kUserTagBits) - 1;
inline constexpr int kSenderBits = 16;

uint64_t pointToPoint(uint32_t channel, uint64_t userTag, uint32_t sender);
// A receive from any source ignores the sender field.
inline constexpr uint64_t kMatchAnySender = ~((uint64_t{1} << kSenderBits) - 1);
constexpr uint32_t sender(uint64_t pointToPointOrInternalTag) {
  return static_cast<uint32_t>(pointToPointOrInternalTag & ((uint64_t{1} << kSenderBits) - 1));
}
constexpr uint64_t userTag(uint64_t pointToPointTag) {
  return (pointToPointTag >> kSenderBits) & kMaxUserTag;
}

// Internal messages of ucxcoll itself (not used by a collective or by the
// user); `purpose` says what for.
inline constexpr uint32_t kMaxPurpose = 0xff;
inline constexpr int kPurposeShift = 42;
// A collective that failed on the sender (value: its sequence number,
// modulo 2^26): the sender will take no further part in the group, so a
// peer still waiting for it fails at once instead of at its deadline. The
// second kind says the failure was a disagreement between ranks.
inline constexpr uint32_t kFailureNotice = 1;
inline constexpr uint32_t kDisagreementNotice = 2;
// Kind, channel, the purpose's upper bits and sender: a notice of either
// kind from one rank, whatever its value.
inline constexpr uint64_t kNoticeFromSenderMask =
    kChannelFieldsMask | (uint64_t{kMaxPurpose & ~3u} << kPurposeShift) | ((uint64_t{1} << kSenderBits) - 1);
inline constexpr uint32_t kMaxInternalValue = (1u << 26) - 1;
uint64_t internal(uint32_t channel, uint32_t purpose, uint32_t value, uint32_t sender);
// The desync report of a timed-out collective (engine/desync_report.cpp):
// a request asks the receiver what it is doing in the group (value: the
// asker's query number), and the reply (same value) says so in text.
inline constexpr uint32_t kStatusRequest = 4;
inline constexpr uint32_t kStatusReply = 5;
// The transport's own farewell between processes (transport/
// ucx_transport.hpp), on channel 0, which no group has.
inline constexpr uint32_t kFarewell = 6;
// A rank closed its group; value: how many of the group's collectives it
// finished (completed, or failed other than by an abort), modulo 2^26. A
// peer waiting for it in a later collective fails at once; one in an
// earlier collective still gets what it sent. The purpose's two low bits
// say how it left (engine/leave_reason.hpp).
inline constexpr uint32_t kLeftNotice = 8;
// Kind, channel, the purpose's upper bits and sender: a left notice of any
// reason from one rank.
inline constexpr uint64_t kLeftNoticeFromSenderMask =
    kChannelFieldsMask | (uint64_t{kMaxPurpose & ~3u} << kPurposeShift) | ((uint64_t{1} << kSenderBits) - 1);
// Kind, channel and the purpose's upper bits: a left notice from any rank.
inline constexpr uint64_t kLeftNoticeMask = kChannelFieldsMask | (uint64_t{kMaxPurpose & ~3u} << kPurposeShift);
// A shrink (engine/member_exchange.hpp): a rank that goes on tells the
// others its channel for the smaller group and the ranks it excludes;
// value: the round (how many shrinks of the group came before).
inline constexpr uint32_t kShrinkOffer = 12;
// Its reports along the tree in a lazily connecting group, as for a
// subgroup below.
inline constexpr uint32_t kShrinkReportUp = 13;
inline constexpr uint32_t kShrinkReportDown = 14;
// A subgroup made from the group's ranks (split, new_group), likewise;
// value: 26 bits of a hash of the new group's name. In a block of four
// of its own, as every purpose that masks may someday group.
inline constexpr uint32_t kSubgroupOffer = 16;
// The same in a lazily connecting group, where the members trade offers
// with their neighbours in a tree instead (engine/member_exchange_tree.cpp):
// a member's report to its parent in the tree (its part of the tree's
// channels, or why the exchange failed), and the root's answer passed down.
inline constexpr uint32_t kSubgroupReportUp = 17;
inline constexpr uint32_t kSubgroupReportDown = 18;
// Group setup (setup/table_relay.hpp): a rank sends its children in the
// setup tree the table of the group's addresses; value 0: the table's
// length (8 bytes) and, where it fits, the table; 1: a table that did not.
// Sent before the group exists, to the channel the receiver published for
// it.
inline constexpr uint32_t kSetupTable = 20;
// A rank of a lazily connecting group connected to the receiver (its first
// message to or from it; engine/notices.cpp): the receiver now tells
// it what it tells its peers (a failure, that it left). Value: 26 bits of
// a hash of the group's name, so that a late one never counts for a later
// group on the same channel.
inline constexpr uint32_t kReachedNotice = 24;
// Kind, channel, purpose and value: such notices from any rank.
inline constexpr uint64_t kReachedNoticeMask =
    kChannelFieldsMask | (uint64_t{kMaxPurpose} << kPurposeShift) | (uint64_t{kMaxInternalValue} << kSenderBits);
constexpr uint32_t purposeOf(uint64_t internalTag) {
  return static_cast<uint32_t>((internalTag >> kPurposeShift) & kMaxPurpose);
}
// Kind and purpose: every internal message of one purpose, whatever its
// channel, value and sender.
inline constexpr uint64_t kPurposeMask = (uint64_t{3} << kKindShift) | (uint64_t{kMaxPurpose} << kPurposeShift);
// 64 bits (a hash) folded into an internal message's value.
constexpr uint32_t internalValueOf(uint64_t bits) {
  return static_cast<uint32_t>(bits ^ (bits >> 32)) & kMaxInternalValue;
}
constexpr uint32_t internalValue(uint64_t internalTag) {
  return static_cast<uint32_t>((internalTag >> kSenderBits) & kMaxInternalValue);
}

// Number of bits needed to write every value below `count` (0 for 1).
constexpr uint32_t bitsFor(uint32_t count) {
  return count <= 1 ? 0 : static_cast<uint32_t>(std::bit_width(count - 1));
}

}  // namespace ucxcoll::tag
