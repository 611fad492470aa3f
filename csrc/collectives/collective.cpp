#include "collectives/collective.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/error.hpp"

namespace ucxcoll {

std::byte* Workspace::Area::get(std::size_t bytes) {
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
      groupRank_(group->rank()),
      groupSize_(group->size()),
      sequence_(sequence),
      what_(what),
      body_(std::move(body)),
      workspace_(workspace ? std::move(workspace) : std::make_shared<Workspace>()) {}

void Collective::begin(tag::Routine routine, uint32_t detail) {
  if (inView_) {
    if (viewBegun_) {
      throw std::logic_error("Collective::begin called twice in one rank view");
    }
    if (viewCarriesGroupDetail_ && tag::detailOf(routine) != tag::detailOf(routine_)) {
      throw std::logic_error("a phase carries its composition's detail only where both have the same kind");
    }
    viewRoutine_ = routine;
    viewDetail_ = detail;
    viewBegun_ = true;
    return;
  }
  if (begun_) {
    throw std::logic_error("Collective::begin called twice by one algorithm");
  }
  routine_ = routine;
  detail_ = detail;
  begun_ = true;
}

Collective::View::View(Collective& c, std::vector<int> members, Tags tags) : c_(c) {
  if (!c.begun_ || !tag::isComposed(c.routine_) || c.inView_) {
    throw std::logic_error("a rank view is entered by a composed routine, after its begin, one at a time");
  }
  if (c.phases_ == (1u << tag::kPhaseIndexBits)) {
    throw std::logic_error("a composed collective has at most 4 phases");
  }
  const auto me = std::find(members.begin(), members.end(), c.groupRank_);
  if (me == members.end()) {
    throw std::logic_error("a rank view must contain its own rank");
  }
  c.rank_ = static_cast<int>(me - members.begin());
  c.size_ = static_cast<int>(members.size());
  c.members_ = std::move(members);
  c.inView_ = true;
  c.viewBegun_ = false;
  c.viewCarriesGroupDetail_ = tags == Tags::GroupDetail;
  ++c.phases_;
}

Collective::View::~View() {
  c_.inView_ = false;
  c_.rank_ = c_.groupRank_;
  c_.size_ = c_.groupSize_;
}

uint64_t Collective::tagFor(uint32_t channel, uint32_t slot, int sender) const {
  const tag::CollectiveLayout& layout = group()->layout();
  if (inView_) {
    if (!viewBegun_) {
      throw std::logic_error("an algorithm sent or received in a rank view before Collective::begin");
    }
    return layout.make(channel, tag::phaseOf(viewRoutine_), tag::phaseSequence(sequence_, phases_ - 1, routine_),
                       layout.slotFor(viewRoutine_, phaseTagDetail(), slot), static_cast<uint32_t>(sender));
  }
  if (!begun_) {
    throw std::logic_error("an algorithm sent or received before Collective::begin");
  }
  return layout.make(channel, routine_, sequence_, layout.slotFor(routine_, detail_, slot),
                     static_cast<uint32_t>(sender));
}

Request& Collective::send(int peer, uint32_t slot, const void* data, std::size_t bytes) {
  const int to = groupRank(peer);
  return sendTagged(to, tagFor(group()->peerChannel(to), slot, groupRank_), data, bytes);
}

Request& Collective::sendSync(int peer, uint32_t slot, const void* data, std::size_t bytes) {
  const int to = groupRank(peer);
  return sendTagged(to, tagFor(group()->peerChannel(to), slot, groupRank_), data, bytes, SendMode::Synchronous);
}

Request& Collective::recv(int peer, uint32_t slot, void* data, std::size_t bytes) {
  const int from = groupRank(peer);
  return recvTagged(from, tagFor(group()->channel(), slot, from), tag::kMatchAll, data, bytes);
}

std::string Collective::describe(tag::Routine routine, uint32_t detail) const {
  return tag::collectiveName(routine) + describeDetail(routine, detail);
}

std::string Collective::describeDetail(tag::Routine routine, uint32_t detail) {
  const std::string algorithm = std::string(tag::algorithmName(routine)) + " algorithm)";
  const tag::Routine inner = tag::innerOf(routine);
  const bool towardsRoot = inner == tag::Routine::GatherDirect || inner == tag::Routine::ReduceDirect ||
                           inner == tag::Routine::ReduceHierarchical;
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
  std::string text = begun_ ? describe() + describeDetail(routine_, detail_) : describe();
  if (inView_ && viewBegun_) {
    text += ", phase " + std::to_string(phases_) + ": " + describe(viewRoutine_, phaseTagDetail()) + " among ranks";
    for (std::size_t i = 0; i < members_.size(); ++i) {
      text += (i == 0 ? " " : ", ") + std::to_string(members_[i]);
    }
  }
  return text;
}

std::string Collective::describeTag(uint64_t theirs) const {
  const tag::CollectiveLayout& layout = group()->layout();
  const std::string what = describe(layout.routine(theirs), layout.detail(theirs));
  if (!tag::isPhase(layout.routine(theirs))) {
    return what;
  }
  const uint64_t field = layout.sequence(theirs);
  return std::string(tag::collectiveName(tag::composedOf(field))) + " (" + tag::algorithmName(tag::composedOf(field)) +
         " algorithm), phase " + std::to_string(tag::phaseIndexOf(field) + 1) + ": " + what;
}

void Collective::announceFailure(const std::exception_ptr& error) {
  uint32_t purpose = tag::kFailureNotice;
  try {
    std::rethrow_exception(error);
  } catch (const AbortedError&) {
    return;  // aborted or shut down here: the peers get their own answer
  } catch (const PeerGoneError&) {
    // Every survivor learns of a dead peer by itself, and names it; a
    // notice from this rank would only race with that and say less. A rank
    // that left told every rank of an eager group, but only the ranks that
    // can be waiting for it in a lazy one: pass its notice on, so that a
    // rank waiting for this one learns who left (engine/notices.cpp).
    if (leaver_ && group()->connectsLazily()) {
      tellGroup(tag::kLeftNotice + static_cast<uint32_t>(leaver_->how), leaver_->finishedCollectives,
                static_cast<uint32_t>(leaver_->rank));
    }
    return;
  } catch (const MismatchError&) {
    purpose = tag::kDisagreementNotice;
  } catch (...) {
  }
  // The whole group, whatever rank view the algorithm was in.
  tellGroup(purpose, static_cast<uint32_t>(sequence_ & tag::kMaxInternalValue), static_cast<uint32_t>(groupRank_));
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
  // Only then a peer that left: a rank whose group failed leaves too, and
  // its failure notice (sent first) says more. A rank this collective waits
  // for first, then any rank of the group: one that waits for a rank that
  // waits for the leaver (a ring, a composition) will get nothing either,
  // and a rank failed by a peer that left tells nobody.
  std::vector<LeftPeer> left = leftPeersAwaited(transport);
  if (left.empty()) {
    if (auto any = anyLeftPeer(transport)) {
      left.push_back(*any);
    }
  }
  for (const LeftPeer& leaver : left) {
    // It finished (completed or failed) collectives #0 .. #finished-1:
    // what it sent for those is on its way.
    const uint64_t behind = (sequence_ - leaver.finishedCollectives) & tag::kMaxInternalValue;
    if (behind <= tag::kMaxInternalValue / 2) {
      leaver_ = leaver;
      return std::make_exception_ptr(
          PeerGoneError(name() + ": " + describeLeaving(leaver) + "; it will take part in no more" + kClosedByPeer));
    }
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
  const std::string mine = describe(routine_, detail_);
  if (auto found = checkEvidence(transport, routine_, detail_, sequence_, mine)) {
    return found;
  }
  if (!inView_ || !viewBegun_) {
    // A flat algorithm (or a composition between its phases) never matches
    // a phase of another composition.
    return checkOtherCompositions(transport, mine);
  }
  // In a phase: a message of another composition under this collective's
  // number (at any phase), or of this phase with another algorithm, root
  // or reduction.
  const std::string phase =
      mine + ", phase " + std::to_string(phases_) + ": " + describe(viewRoutine_, phaseTagDetail());
  if (auto found = checkOtherCompositions(transport, phase)) {
    return found;
  }
  if (auto found = checkEvidence(transport, tag::phaseOf(viewRoutine_), phaseTagDetail(),
                                 tag::phaseSequence(sequence_, phases_ - 1, routine_), phase)) {
    return found;
  }
  return viewCarriesGroupDetail_ ? checkOtherPhasesDetail(transport, phase) : nullptr;
}

std::exception_ptr Collective::checkOtherCompositions(Transport& transport, const std::string& mine) {
  const tag::CollectiveLayout& layout = group()->layout();
  const uint32_t channel = group()->channel();
  const uint64_t anyPhaseRoutine = layout.sameCollectiveMask() | (uint64_t{tag::kPhaseBit} << tag::kRoutineShift);
  for (tag::Routine composed : tag::kRoutines) {
    if (!tag::isComposed(composed) || composed == routine_) {
      continue;
    }
    for (uint32_t index = 0; index < (1u << tag::kPhaseIndexBits); ++index) {
      const uint64_t field = tag::phaseSequence(sequence_, index, composed);
      if (auto found = transport.probe(layout.make(channel, tag::phaseOf(tag::Routine{}), field, 0), anyPhaseRoutine)) {
        return evidenceOfDisagreement(mine, found->senderTag);
      }
    }
  }
  return nullptr;
}

std::exception_ptr Collective::checkOtherPhasesDetail(Transport& transport, const std::string& mine) {
  // Every phase's messages carry the composition's root (and reduction):
  // the first message waiting here from another phase tells, as a rank
  // waits in one phase while a peer that disagrees is in another.
  const tag::CollectiveLayout& layout = group()->layout();
  const uint32_t channel = group()->channel();
  const uint64_t anyPhaseRoutine = layout.sameCollectiveMask() | (uint64_t{tag::kPhaseBit} << tag::kRoutineShift);
  for (uint32_t index = 0; index < (1u << tag::kPhaseIndexBits); ++index) {
    if (index == phases_ - 1) {
      continue;
    }
    const uint64_t field = tag::phaseSequence(sequence_, index, routine_);
    if (auto found = transport.probe(layout.make(channel, tag::phaseOf(tag::Routine{}), field, 0), anyPhaseRoutine)) {
      if (layout.detail(found->senderTag) != detail_) {
        return evidenceOfDisagreement(mine, found->senderTag);
      }
    }
  }
  return nullptr;
}

std::exception_ptr Collective::checkEvidence(Transport& transport, tag::Routine routine, uint32_t detail,
                                             uint64_t sequence, const std::string& mine) {
  const uint32_t channel = group()->channel();
  // A message under this sequence number that this collective can never
  // match: a peer runs another collective, algorithm, root or reduction.
  const tag::CollectiveLayout& layout = group()->layout();
  const uint64_t sameRoutine = layout.sameCollectiveMask() | tag::kRoutineFieldMask;
  const bool phase = tag::isPhase(routine);
  for (tag::Routine other : tag::kRoutines) {
    const tag::Routine candidate = phase ? tag::phaseOf(other) : other;
    if (candidate == routine || (phase && tag::isComposed(other))) {
      continue;
    }
    if (auto found = transport.probe(layout.make(channel, candidate, sequence, 0), sameRoutine)) {
      return evidenceOfDisagreement(mine, found->senderTag);
    }
  }
  if (tag::detailOf(routine) == tag::Detail::None) {
    return nullptr;
  }
  // The same routine with another root or reduction: the first message of
  // this routine that waits here tells for roots (a rank receives only one
  // message per round there); reductions are few enough to look for each.
  if (auto found = transport.probe(layout.make(channel, routine, sequence, 0), sameRoutine)) {
    if (layout.detail(found->senderTag) != detail) {
      return evidenceOfDisagreement(mine, found->senderTag);
    }
  }
  if (tag::detailOf(routine) == tag::Detail::Reduction || tag::detailOf(routine) == tag::Detail::RootAndReduction) {
    // Same root (if any), each other reduction.
    const uint32_t reductionMask = (1u << tag::kReductionBits) - 1;
    const uint32_t root = tag::detailOf(routine) == tag::Detail::Reduction ? 0 : detail & ~reductionMask;
    const uint64_t sameDetail = sameRoutine | layout.detailMask(routine);
    for (uint32_t reduction = 0; reduction <= reductionMask; ++reduction) {
      const uint32_t other = root | reduction;
      if (other == detail) {
        continue;
      }
      uint64_t candidate = layout.make(channel, routine, sequence, layout.slotFor(routine, other, 0));
      if (auto found = transport.probe(candidate, sameDetail)) {
        return evidenceOfDisagreement(mine, found->senderTag);
      }
    }
  }
  return nullptr;
}

std::exception_ptr Collective::evidenceOfDisagreement(const std::string& mine, uint64_t theirs) const {
  return std::make_exception_ptr(MismatchError(
      name() + ": ranks disagree about collective #" + std::to_string(sequence_) + ": this rank runs " + mine +
      ", but a peer sent a message of " + describeTag(theirs) +
      " for it; every rank must call the same collectives, in the same order, with the same root, reduction "
      "and tensor sizes"));
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
