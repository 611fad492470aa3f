#include "collectives/collective.hpp"

#include <cstring>
#include <stdexcept>

#include "common/error.hpp"

namespace ucxcoll {

std::byte* Workspace::get(std::size_t bytes) {
  if (bytes > capacity_) {
    // for_overwrite: no zero-filling of memory that is about to be written.
    buffer_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    capacity_ = bytes;
  }
  return buffer_.get();
}

Collective::Collective(std::shared_ptr<Group> group, uint64_t sequence, const char* what,
                       std::chrono::milliseconds timeout, Body body, std::shared_ptr<Workspace> workspace)
    : Operation(Kind::Collective, group, timeout),
      rank_(group->rank()),
      size_(group->size()),
      sequence_(sequence),
      what_(what),
      body_(std::move(body)),
      workspace_(workspace ? std::move(workspace) : std::make_shared<Workspace>()) {}

void Collective::begin(tag::Routine routine, uint32_t detail) {
  if (begun_) {
    throw std::logic_error("Collective::begin called twice by one algorithm");
  }
  routine_ = routine;
  detail_ = detail;
  begun_ = true;
}

uint64_t Collective::tagFor(uint32_t channel, uint32_t slot, int sender) const {
  if (!begun_) {
    throw std::logic_error("an algorithm sent or received before Collective::begin");
  }
  const tag::CollectiveLayout& layout = group()->layout();
  return layout.make(channel, routine_, sequence_, layout.slotFor(routine_, detail_, slot),
                     static_cast<uint32_t>(sender));
}

Request& Collective::send(int peer, uint32_t slot, const void* data, std::size_t bytes) {
  return sendTagged(peer, tagFor(group()->peerChannel(peer), slot, rank_), data, bytes);
}

Request& Collective::sendSync(int peer, uint32_t slot, const void* data, std::size_t bytes) {
  return sendTagged(peer, tagFor(group()->peerChannel(peer), slot, rank_), data, bytes, SendMode::Synchronous);
}

Request& Collective::recv(int peer, uint32_t slot, void* data, std::size_t bytes) {
  return recvTagged(peer, tagFor(group()->channel(), slot, peer), tag::kMatchAll, data, bytes);
}

std::string Collective::describe(tag::Routine routine, uint32_t detail) const {
  return tag::collectiveName(routine) + describeDetail(routine, detail);
}

std::string Collective::describeDetail(tag::Routine routine, uint32_t detail) {
  const std::string algorithm = std::string(tag::algorithmName(routine)) + " algorithm)";
  const bool towardsRoot = routine == tag::Routine::GatherDirect || routine == tag::Routine::ReduceDirect;
  const char* rootWord = towardsRoot ? " to rank " : " from rank ";
  switch (tag::detailOf(routine)) {
    case tag::Detail::Root:
      return rootWord + std::to_string(detail) + " (" + algorithm;
    case tag::Detail::Reduction:
      return " (" + std::string(reductionName(static_cast<Reduction>(detail))) + ", " + algorithm;
    case tag::Detail::RootAndReduction:
      return rootWord + std::to_string(detail >> tag::kReductionBits) + " (" +
             reductionName(static_cast<Reduction>(detail & ((1u << tag::kReductionBits) - 1))) + ", " + algorithm;
    case tag::Detail::None:
      break;
  }
  return " (" + algorithm;
}

std::string Collective::describeProgress() const {
  return begun_ ? describe() + describeDetail(routine_, detail_) : describe();
}

void Collective::announceFailure(const std::exception_ptr& error) {
  uint32_t purpose = tag::kFailureNotice;
  try {
    std::rethrow_exception(error);
  } catch (const AbortedError&) {
    return;  // aborted or shut down here: the peers get their own answer
  } catch (const MismatchError&) {
    purpose = tag::kDisagreementNotice;
  } catch (...) {
  }
  const auto value = static_cast<uint32_t>(sequence_ & tag::kMaxInternalValue);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) {
      sendTagged(peer, tag::internal(group()->peerChannel(peer), purpose, value, static_cast<uint32_t>(rank_)), nullptr,
                 0);
    }
  }
}

std::exception_ptr Collective::checkForFailureNotice(Transport& transport) {
  if (!begun_) {
    return nullptr;
  }
  // A peer this collective still waits for gave up on the group (a
  // collective of it failed: this one, or one before that this rank has
  // already completed): what this rank waits for will never come.
  const uint32_t channel = group()->channel();
  for (int peer : peersAwaited()) {
    auto notice = transport.probe(tag::internal(channel, tag::kFailureNotice, 0, static_cast<uint32_t>(peer)),
                                  tag::kNoticeFromSenderMask);
    if (!notice) {
      continue;
    }
    const uint64_t theirs = (notice->senderTag >> tag::kSenderBits) & tag::kMaxInternalValue;
    const bool disagreement =
        ((notice->senderTag >> tag::kPurposeShift) & tag::kMaxPurpose) == tag::kDisagreementNotice;
    const std::string rank = "rank " + std::to_string(peer);
    if (disagreement) {
      return std::make_exception_ptr(
          MismatchError(name() + ": ranks disagree about collective #" + std::to_string(theirs) + ": " + rank +
                        " found that they do (its own error says how) and will not take part in this group any more"));
    }
    return std::make_exception_ptr(Error(name() + ": " + rank + " gave up on this group: its collective #" +
                                         std::to_string(theirs) +
                                         " failed (its own error says why), so it will not take part in this one"));
  }
  return nullptr;
}

std::exception_ptr Collective::checkForDisagreement(Transport& transport) {
  // What this rank can see itself first: it names the disagreement.
  if (auto own = checkOwnEvidence(transport)) {
    return own;
  }
  return checkForFailureNotice(transport);
}

std::exception_ptr Collective::checkOwnEvidence(Transport& transport) {
  if (!begun_) {
    return nullptr;
  }
  const uint32_t channel = group()->channel();
  // A message under this sequence number that this collective can never
  // match: a peer runs another collective, algorithm, root or reduction.
  const tag::CollectiveLayout& layout = group()->layout();
  const uint64_t sameRoutine = layout.sameCollectiveMask() | tag::kRoutineFieldMask;
  auto disagreement = [&](uint64_t theirs) {
    return std::make_exception_ptr(MismatchError(
        name() + ": ranks disagree about collective #" + std::to_string(sequence_) + ": this rank runs " +
        describe(routine_, detail_) + ", but a peer sent a message of " +
        describe(layout.routine(theirs), layout.detail(theirs)) +
        " for it; every rank must call the same collectives, in the same order, with the same root, reduction "
        "and tensor sizes"));
  };
  for (tag::Routine routine : tag::kRoutines) {
    if (routine == routine_) {
      continue;
    }
    if (auto found = transport.probe(layout.make(channel, routine, sequence_, 0), sameRoutine)) {
      return disagreement(found->senderTag);
    }
  }
  if (tag::detailOf(routine_) == tag::Detail::None) {
    return nullptr;
  }
  // The same routine with another root or reduction: the first message of
  // this routine that waits here tells for roots (a rank receives only one
  // message per round there); reductions are few enough to look for each.
  if (auto found = transport.probe(layout.make(channel, routine_, sequence_, 0), sameRoutine)) {
    if (layout.detail(found->senderTag) != detail_) {
      return disagreement(found->senderTag);
    }
  }
  if (tag::detailOf(routine_) == tag::Detail::Reduction || tag::detailOf(routine_) == tag::Detail::RootAndReduction) {
    // Same root (if any), each other reduction.
    const uint32_t reductionMask = (1u << tag::kReductionBits) - 1;
    const uint32_t root = tag::detailOf(routine_) == tag::Detail::Reduction ? 0 : detail_ & ~reductionMask;
    const uint64_t sameDetail = sameRoutine | layout.detailMask(routine_);
    for (uint32_t reduction = 0; reduction <= reductionMask; ++reduction) {
      const uint32_t other = root | reduction;
      if (other == detail_) {
        continue;
      }
      uint64_t candidate = layout.make(channel, routine_, sequence_, layout.slotFor(routine_, other, 0));
      if (auto found = transport.probe(candidate, sameDetail)) {
        return disagreement(found->senderTag);
      }
    }
  }
  return nullptr;
}

std::string Collective::mismatchHint() const {
  return " (ranks disagree about the tensor sizes)";
}

void copyBytes(void* destination, const void* source, std::size_t bytes) {
  if (destination != source && bytes > 0) {
    std::memmove(destination, source, bytes);
  }
}

}  // namespace ucxcoll
