#pragma once
// The one place that defines how a 64-bit UCX tag is laid out.
//
//   63        48 47        32 31        16 15         0
//  +------------+------------+------------+------------+
//  |  group id  | collective |    step    |   sender   |
//  |            |  sequence  |  / chunk   | group rank |
//  +------------+------------+------------+------------+
//
// UCX matches tags per worker, not per endpoint, and every group in a
// process shares one worker: the group id keeps groups apart, the sequence
// number keeps collective k from matching collective k+1, the step keeps the
// rounds of one algorithm apart, and the sender field tells which peer a
// message came from. A receive from "any source" masks the sender field.

#include <cstdint>

namespace ucxcoll::tag {

inline constexpr int kSenderShift = 0;
inline constexpr int kStepShift = 16;
inline constexpr int kSequenceShift = 32;
inline constexpr int kGroupShift = 48;
inline constexpr uint64_t kFieldMask = 0xffff;

// Largest group a 16-bit sender field can address.
inline constexpr uint32_t kMaxGroupSize = 1u << 16;

inline constexpr uint64_t kMatchAll = ~uint64_t{0};
inline constexpr uint64_t kMatchAnySender = ~(kFieldMask << kSenderShift);

// Every field wraps modulo 2^16: a sequence number or step that wraps can
// only collide with one 65,536 collectives (steps) away, and no rank gets
// that far ahead of its peers because every collective waits for them.
constexpr uint64_t make(uint32_t group, uint32_t sequence, uint32_t step, uint32_t sender) {
  return ((uint64_t{group} & kFieldMask) << kGroupShift) | ((uint64_t{sequence} & kFieldMask) << kSequenceShift) |
         ((uint64_t{step} & kFieldMask) << kStepShift) | ((uint64_t{sender} & kFieldMask) << kSenderShift);
}

constexpr uint32_t group(uint64_t tag) {
  return static_cast<uint32_t>((tag >> kGroupShift) & kFieldMask);
}
constexpr uint32_t sequence(uint64_t tag) {
  return static_cast<uint32_t>((tag >> kSequenceShift) & kFieldMask);
}
constexpr uint32_t step(uint64_t tag) {
  return static_cast<uint32_t>((tag >> kStepShift) & kFieldMask);
}
constexpr uint32_t sender(uint64_t tag) {
  return static_cast<uint32_t>((tag >> kSenderShift) & kFieldMask);
}

}  // namespace ucxcoll::tag
