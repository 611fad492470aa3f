// Stray messages: what arrives at this process's worker but can never be
// received by any of its groups.
//
// A message is received only by a receive whose tag matches (tag.hpp), and
// every tag carries the receiving process's channel for the group. So a
// message whose tag names a channel this process never opened, or no kind
// of ours, cannot be ours: it comes from a process outside the job (its tag
// was XORed with another job key or none, see UcxTransport::setJobKey), or
// from a defect. A message to a channel this process has closed is a late
// one of a group it destroyed (a peer still sending when the group failed).
// Neither is ever matched, but UCX keeps both in its unexpected queue until
// someone takes them: an outsider could fill memory that way, and nobody
// would learn that someone is sending here. So the driver sweeps them out
// about once a second (housekeeping, and the idle progress thread's pass):
// it logs the first kind as a warning and the second at info level, since a
// failed group's late messages are expected. Messages to channels that are
// open are left alone: they may be early messages of a collective this rank
// has not reached yet, and an outsider's message lands on an open channel
// only if its key agrees with ours in those bits (1 in 2^14 for a random key);
// it is dropped when the channel is reused (openChannel).
//
// The sweep probes whole aligned ranges of channels at once (a masked
// probe), so its cost grows with the number of open groups, not with the
// 4,095 channels.

#include <bit>
#include <cstdint>

#include "common/logging.hpp"
#include "engine/engine.hpp"

namespace ucxcoll {
namespace {

constexpr auto kStraySweepPeriod = std::chrono::seconds(1);
constexpr uint32_t kChannelBits = std::bit_width(tag::kMaxChannel);

}  // namespace

void Engine::dropStrayMessages(Clock::time_point now) {
  if (now < nextStraySweep_) {
    return;
  }
  nextStraySweep_ = now + kStraySweepPeriod;

  if (strayRangesStale_) {
    // The largest aligned ranges of channels that are all closed or all
    // never opened; open channels are left out.
    strayRanges_.clear();
    auto cover = [this](auto& self, uint32_t first, uint32_t bits) -> void {
      const ChannelState state = channels_[first];
      bool uniform = true;
      for (uint32_t channel = first + 1; channel < first + (1u << bits) && uniform; ++channel) {
        uniform = channels_[channel] == state;
      }
      if (uniform) {
        if (state != ChannelState::Open) {
          strayRanges_.push_back({first, bits, state == ChannelState::NeverOpened});
        }
        return;
      }
      self(self, first, bits - 1);
      self(self, first + (1u << (bits - 1)), bits - 1);
    };
    cover(cover, 0, kChannelBits);
    strayRangesStale_ = false;
  }

  // Kind 0 is none of ours, whatever the channel.
  std::size_t foreign = transport_->discard(0, uint64_t{3} << tag::kKindShift);
  std::size_t late = 0;
  for (const StrayRange& range : strayRanges_) {
    std::size_t dropped = transport_->discard(tag::channelBlockTag(range.first), tag::channelBlockMask(range.bits));
    (range.foreign ? foreign : late) += dropped;
  }
  if (foreign > 0) {
    foreignMessages_.fetch_add(foreign, std::memory_order_relaxed);
    // After a change of job, the old job's messages still in flight decode
    // under the new key as garbage too: say so rather than blame outsiders.
    UCXCOLL_WARN("dropped " << foreign
                            << " message(s) that no group of this process can receive: their tags decode to no "
                               "channel or kind of ours, so they were sent under another job key or by a process "
                               "outside this job"
                            << (leftAJob_ ? " (or are late messages of the job this process left)" : "")
                            << " (see \"Network exposure and trust\" in the README)");
  }
  if (late > 0) {
    lateMessages_.fetch_add(late, std::memory_order_relaxed);
    UCXCOLL_INFO("dropped " << late << " late message(s) to process group(s) this process has closed");
  }
}

}  // namespace ucxcoll
