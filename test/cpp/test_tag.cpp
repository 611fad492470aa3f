#include <catch2/catch.hpp>

#include <set>

#include "transport/tag.hpp"

using namespace ucxcoll;
using tag::Routine;

TEST_CASE("collective tags round-trip every field", "[tag]") {
  for (uint32_t size : {1u, 2u, 3u, 16u, 256u, 257u, 65536u}) {
    tag::CollectiveLayout layout(size);
    const uint32_t maxSlot = (1u << layout.slotBits()) - 1;
    const uint64_t maxSequence = (uint64_t{1} << layout.sequenceBits()) - 1;
    const uint32_t maxSender = size - 1;
    uint64_t t = layout.make(tag::kMaxChannel, Routine::AllreduceRing, maxSequence, maxSlot, maxSender);
    CHECK(layout.sender(t) == maxSender);
    CHECK_THROWS_AS(layout.make(1, Routine::AllreduceRing, 0, 0, 1u << layout.rankBits()), std::out_of_range);
    CHECK(tag::kind(t) == tag::Kind::Collective);
    CHECK(tag::channel(t) == tag::kMaxChannel);
    CHECK(layout.routine(t) == Routine::AllreduceRing);
    CHECK(layout.sequence(t) == maxSequence);
    CHECK(layout.slot(t) == maxSlot);
    CHECK(layout.sequenceBits() + layout.slotBits() + layout.rankBits() + tag::kRoutineBits + 12 + 2 == 64);
  }
}

TEST_CASE("the sequence field is wide enough not to wrap in practice", "[tag]") {
  CHECK(tag::CollectiveLayout(2).sequenceBits() == 37);
  CHECK(tag::CollectiveLayout(8).sequenceBits() == 33);
  CHECK(tag::CollectiveLayout(256).sequenceBits() == 23);
  CHECK(tag::CollectiveLayout(65536).sequenceBits() == 7);
  // The 16-bit field of earlier versions wrapped after 65,536 collectives:
  // collective #65,536 took the tag of #0.
  tag::CollectiveLayout layout(2);
  CHECK(layout.make(1, Routine::AllreduceDirect, 0, 0) != layout.make(1, Routine::AllreduceDirect, 65536, 0));
  CHECK(layout.make(1, Routine::AllreduceDirect, 0, 0) != layout.make(1, Routine::AllreduceDirect, 1ull << 32, 0));
  CHECK(layout.sequence(layout.make(1, Routine::AllreduceDirect, 1ull << 36, 0)) == 1ull << 36);
}

TEST_CASE("different collectives, algorithms, roots and groups never share a tag", "[tag]") {
  tag::CollectiveLayout layout(4);
  std::set<uint64_t> seen;
  for (Routine routine : tag::kRoutines) {
    for (uint32_t channel : {1u, 2u}) {
      for (uint64_t sequence : {0ull, 1ull}) {
        if (tag::detailOf(routine) == tag::Detail::Root) {
          for (uint32_t root = 0; root < 4; ++root) {
            CHECK(seen.insert(layout.make(channel, routine, sequence, layout.slotFor(routine, root, 0))).second);
          }
        } else if (tag::detailOf(routine) == tag::Detail::RootAndReduction) {
          for (uint32_t root = 0; root < 4; ++root) {
            for (uint32_t reduction = 0; reduction < 9; ++reduction) {
              uint32_t detail = (root << tag::kReductionBits) | reduction;
              CHECK(seen.insert(layout.make(channel, routine, sequence, layout.slotFor(routine, detail, 1))).second);
              CHECK(layout.detail(layout.make(channel, routine, sequence, layout.slotFor(routine, detail, 1))) ==
                    detail);
            }
          }
        } else if (tag::detailOf(routine) == tag::Detail::Reduction) {
          for (uint32_t reduction = 0; reduction < 7; ++reduction) {
            CHECK(seen.insert(layout.make(channel, routine, sequence, layout.slotFor(routine, reduction, 0))).second);
          }
        } else {
          CHECK(seen.insert(layout.make(channel, routine, sequence, 0)).second);
        }
      }
    }
  }
  // all_reduce vs all_gather, broadcast from 0 vs from 1: the cases that
  // used to match each other.
  CHECK(layout.make(1, Routine::AllreduceDirect, 5, 1) != layout.make(1, Routine::AllgatherDirect, 5, 1));
  const auto broadcast = Routine::BroadcastBinomial;
  CHECK(layout.make(1, broadcast, 5, layout.slotFor(broadcast, 0, 0)) !=
        layout.make(1, broadcast, 5, layout.slotFor(broadcast, 1, 0)));
  CHECK(layout.detail(layout.make(1, broadcast, 5, layout.slotFor(broadcast, 3, 2))) == 3);
  // all_reduce with SUM vs with MAX (reduction 3), same sender slot.
  const auto allreduce = Routine::AllreduceDirect;
  CHECK(layout.make(1, allreduce, 5, layout.slotFor(allreduce, 0, 1)) !=
        layout.make(1, allreduce, 5, layout.slotFor(allreduce, 3, 1)));
  CHECK(layout.detail(layout.make(1, allreduce, 5, layout.slotFor(allreduce, 3, 1))) == 3);
  CHECK((layout.make(1, allreduce, 5, layout.slotFor(allreduce, 3, 1)) & layout.detailMask(allreduce)) ==
        (layout.make(1, allreduce, 5, layout.slotFor(allreduce, 3, 2)) & layout.detailMask(allreduce)));
}

TEST_CASE("messages of one collective from different senders never share a tag", "[tag]") {
  // A collective's receive names its peer: with several peers sending in
  // the same slot (a gather's root, a pairwise exchange), each message
  // must land in the buffer posted for its sender.
  tag::CollectiveLayout layout(5);
  std::set<uint64_t> seen;
  for (uint32_t sender = 0; sender < 5; ++sender) {
    uint64_t t = layout.make(1, Routine::GatherDirect, 3, layout.slotFor(Routine::GatherDirect, 2, 0), sender);
    CHECK(seen.insert(t).second);
    CHECK(layout.sender(t) == sender);
    CHECK(layout.detail(t) == 2);
  }
}

TEST_CASE("the same-collective mask ignores exactly routine and slot", "[tag]") {
  tag::CollectiveLayout layout(8);
  uint64_t mask = layout.sameCollectiveMask();
  uint64_t a = layout.make(3, Routine::AllreduceDirect, 9, 1);
  CHECK((layout.make(3, Routine::AllgatherRing, 9, 7) & mask) == (a & mask));
  CHECK((layout.make(3, Routine::AllreduceDirect, 10, 1) & mask) != (a & mask));
  CHECK((layout.make(4, Routine::AllreduceDirect, 9, 1) & mask) != (a & mask));
  CHECK((tag::pointToPoint(3, 9, 1) & mask) != (a & mask));
}

TEST_CASE("kinds keep collective, point-to-point and internal messages apart", "[tag]") {
  tag::CollectiveLayout layout(2);
  uint64_t collective = layout.make(7, Routine::AllreduceDirect, 0, 0);
  uint64_t p2p = tag::pointToPoint(7, 0, 0);
  uint64_t internal = tag::internal(7, 0, 0, 0);
  CHECK(tag::kind(collective) == tag::Kind::Collective);
  CHECK(tag::kind(p2p) == tag::Kind::PointToPoint);
  CHECK(tag::kind(internal) == tag::Kind::Internal);
  CHECK(std::set<uint64_t>{collective, p2p, internal}.size() == 3);
  CHECK(tag::channel(p2p) == 7);
  CHECK(tag::channel(internal) == 7);
}

TEST_CASE("point-to-point tags carry the user's tag and the sender", "[tag]") {
  uint64_t t = tag::pointToPoint(12, 123456789, 65535);
  CHECK(tag::userTag(t) == 123456789);
  CHECK(tag::sender(t) == 65535);
  CHECK(tag::userTag(tag::pointToPoint(1, tag::kMaxUserTag, 0)) == tag::kMaxUserTag);
  // Any-source receives ignore the sender, nothing else.
  CHECK((tag::pointToPoint(1, 5, 0) & tag::kMatchAnySender) == (tag::pointToPoint(1, 5, 9) & tag::kMatchAnySender));
  CHECK((tag::pointToPoint(1, 5, 0) & tag::kMatchAnySender) != (tag::pointToPoint(1, 6, 0) & tag::kMatchAnySender));
  CHECK((tag::pointToPoint(1, 5, 0) & tag::kMatchAnySender) != (tag::pointToPoint(2, 5, 0) & tag::kMatchAnySender));
  // Every non-negative 32-bit int (torch's tag type) fits.
  CHECK(tag::kMaxUserTag >= 0x7fffffffull);
}

TEST_CASE("out-of-range fields are refused, not wrapped into a neighbour", "[tag]") {
  tag::CollectiveLayout layout(4);                                                     // 2 rank bits: slots below 2^7
  CHECK_THROWS_AS(layout.make(0, Routine::AllreduceDirect, 0, 0), std::out_of_range);  // channel 0 is never used
  CHECK_THROWS_AS(layout.make(tag::kMaxChannel + 1, Routine::AllreduceDirect, 0, 0), std::out_of_range);
  CHECK_THROWS_AS(layout.make(1, Routine::AllreduceDirect, 0, 1u << 7), std::out_of_range);
  CHECK_THROWS_AS(layout.slotFor(Routine::BroadcastBinomial, 4, 0), std::out_of_range);   // root 4 of 4 ranks
  CHECK_THROWS_AS(layout.slotFor(Routine::BroadcastBinomial, 0, 32), std::out_of_range);  // round 32
  CHECK_THROWS_AS(layout.slotFor(Routine::AllreduceDirect, 16, 0), std::out_of_range);    // reduction 16
  CHECK_THROWS_AS(layout.slotFor(Routine::AllreduceDirect, 0, 8), std::out_of_range);     // sender slot >= 2*4
  CHECK_THROWS_AS(layout.slotFor(Routine::AllgatherDirect, 1, 0), std::out_of_range);     // no detail there
  CHECK_THROWS_AS(tag::pointToPoint(1, tag::kMaxUserTag + 1, 0), std::out_of_range);
  CHECK_THROWS_AS(tag::pointToPoint(1, 0, tag::kMaxGroupSize), std::out_of_range);
  CHECK_THROWS_AS(tag::internal(1, tag::kMaxPurpose + 1, 0, 0), std::out_of_range);
  CHECK_THROWS_AS(tag::CollectiveLayout(0), std::out_of_range);
  CHECK_THROWS_AS(tag::CollectiveLayout(tag::kMaxGroupSize + 1), std::out_of_range);
  CHECK_THROWS_WITH(tag::pointToPoint(1, tag::kMaxUserTag + 1, 0),
                    Catch::Matchers::Contains("point-to-point tag 17179869184 is outside 0..17179869183"));
}

TEST_CASE("the channel-fields mask selects one group's messages of every kind", "[tag]") {
  tag::CollectiveLayout layout(2);
  uint64_t wanted = uint64_t{5} << tag::kChannelShift;
  uint64_t mask = tag::kChannelFieldsMask & ~(uint64_t{3} << tag::kKindShift);
  CHECK((layout.make(5, Routine::AllgatherRing, 77, 3) & mask) == wanted);
  CHECK((tag::pointToPoint(5, 1, 1) & mask) == wanted);
  CHECK((tag::pointToPoint(6, 1, 1) & mask) != wanted);
}

TEST_CASE("phase tags keep at least 12 bits of the collective's number up to 1,024 ranks", "[tag]") {
  CHECK(tag::CollectiveLayout(4).fitsPhases());
  CHECK(tag::CollectiveLayout(1024).fitsPhases());
  CHECK(tag::CollectiveLayout(1024).sequenceBits() - tag::kPhaseIndexBits - tag::kComposedRoutineBits >= 12);
  CHECK_FALSE(tag::CollectiveLayout(1025).fitsPhases());
  CHECK_FALSE(tag::CollectiveLayout(65536).fitsPhases());
}
