#pragma once
// The one exchange a group made from a parent's ranks needs (torch's
// shrink_group, split_group, and new_group under a ucxcoll default group):
// every member tells every other one, over the parent's own connections,
// the channel it opened for the new group and which of the parent's ranks
// it takes in. No store is involved: the parent's setup already found how
// to reach everyone, so a new group costs each member one small message to
// each other member.
//
// It runs even on a parent that has failed (the usual reason to shrink is a
// dead rank), as a transfer of that group: a member that dies meanwhile,
// or closes the parent instead, fails the exchange at once, naming it.
// Members that pass different lists all raise, naming each other's lists:
// they must not build groups that disagree about who is in them.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/operation.hpp"

namespace ucxcoll {

// What the new group is and how its members name it to each other.
struct NewGroupTerms {
  enum class Reason {
    Shrink,    // the parent's ranks but `excluded`; value: the round
    Subgroup,  // `members`, in the new group's order; value: from the name
  };
  Reason reason = Reason::Subgroup;
  // Parent ranks, in the order of the new group's ranks (this one included).
  std::vector<int> members;
  std::string name;    // the new group's (Subgroup: part of what must agree)
  uint32_t round = 0;  // Shrink: how many shrinks of this parent came before

  static NewGroupTerms shrink(int parentSize, const std::vector<int>& excluded, uint32_t round);
  static NewGroupTerms subgroup(std::vector<int> members, std::string name);
  // Shrink: the parent ranks left out, ascending.
  std::vector<int> excluded(int parentSize) const;
};

class MemberExchange final : public Operation {
 public:
  // `channel`: the one this process opened for the new group. Once it
  // succeeded, `channels` holds, by parent rank, each member's channel for
  // the new group (0 for other ranks); shared with the caller, who may read
  // it after the engine destroyed this.
  MemberExchange(std::shared_ptr<Group> parent, NewGroupTerms terms, uint32_t channel,
                 std::chrono::milliseconds timeout, std::shared_ptr<std::vector<uint32_t>> channels);

  // "[1, 3]".
  static std::string formatRanks(const std::vector<int>& ranks);
  // The offer this rank sends (for ShrinkNotice), and the tag value and
  // purpose it goes under.
  const std::vector<uint8_t>& offer() const { return mine_; }
  uint32_t tagValue() const { return value_; }

 protected:
  Task run() override;
  std::string describe() const override;
  std::exception_ptr checkForDisagreement(Transport& transport) override;

 private:
  // What each member sends: its new channel, a fingerprint of the terms
  // (Subgroup: the name and the members' order), then the members as a
  // bitmap of parent ranks, so that every offer has the same size whatever
  // the list.
  std::vector<uint8_t> encodeOffer() const;
  std::size_t offerBytes() const;
  std::vector<int> membersIn(const std::vector<uint8_t>& offer) const;
  uint64_t fingerprint() const;
  uint32_t purpose() const;
  std::string disagreement(int peer, const std::vector<uint8_t>& offer) const;
  // A received offer that differs from this rank's, as the error to raise.
  std::exception_ptr firstDisagreement() const;

  NewGroupTerms terms_;
  uint32_t value_;
  uint32_t channel_;
  std::vector<uint8_t> mine_;
  std::vector<std::vector<uint8_t>> offers_;         // by parent rank
  std::vector<const Request*> offerReceives_;        // by parent rank; null: not a member (or this rank)
  std::shared_ptr<std::vector<uint32_t>> channels_;  // by parent rank
};

// A shrink's offer, sent to the excluded ranks that are still there (not
// known dead): one that calls shrink with another list learns of this
// rank's list at once and raises, instead of waiting for the deadline.
// Nobody waits for it, and a send that fails (an excluded rank died) is
// of no consequence.
class ShrinkNotice final : public Operation {
 public:
  ShrinkNotice(std::shared_ptr<Group> parent, std::vector<int> excluded, std::vector<uint8_t> offer, uint32_t round,
               std::chrono::milliseconds timeout);

 protected:
  Task run() override;
  std::string describe() const override;

 private:
  std::vector<int> excluded_;
  std::vector<uint8_t> offer_;
  uint32_t round_;
};

}  // namespace ucxcoll
