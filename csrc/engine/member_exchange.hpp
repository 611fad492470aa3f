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
//
// In a lazily connecting parent the members do not trade with every other
// member, which would connect each pair of them: they trade
// along a binomial tree of the members (engine/member_exchange_tree.cpp),
// so that each connects to at most about log2(members) others.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
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
  void announceFailure(const std::exception_ptr& error) override;

 private:
  // Every member sends its offer to every other member.
  Task exchangeWithEveryMember();
  // Along the members' tree (member_exchange_tree.cpp): offers to and from
  // the tree neighbours, then each member's part of the channels up to the
  // root and the whole table down from it.
  Task exchangeOverTree();
  bool overTree() const;
  // The purpose of a report to the tree parent (up) or to a child.
  uint32_t reportPurpose(bool up) const;
  // The tree, over the members in ascending order of parent rank: index i's
  // parent is i with its lowest set bit cleared, its part of the tree the
  // indices [i, i + lowest set bit of i).
  void planTree();
  std::size_t subtreeEnd(std::size_t index) const;
  // A report: a verdict, then what it is about, then channels.
  std::size_t reportHeaderBytes() const;
  std::vector<uint8_t> encodeFailureReport(const std::exception_ptr& error) const;
  // A report that is not "agreed", as the error to raise.
  std::exception_ptr failureIn(int sender, const std::vector<uint8_t>& report);
  // The first report received that says the exchange failed, if any.
  std::exception_ptr reportedFailure();
  // An offer from a rank that is no tree neighbour of this one (its tree,
  // so its list, differs): received, so that firstDisagreement names it;
  // for a shrink, one from a rank it excludes is dropped instead (the
  // shrink's notice tells that rank).
  void receiveStrayOffers(Transport& transport);
  Request& expectOffer(int peer);

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
  // Whether an offer (offerBytes() long) names the same terms as this rank's.
  bool sameTermsAsMine(const uint8_t* offer) const;
  // A received offer that differs from this rank's, as the error to raise
  // (and, once found, the objection to pass on).
  std::exception_ptr firstDisagreement();

  NewGroupTerms terms_;
  uint32_t value_;
  uint32_t channel_;
  std::vector<uint8_t> mine_;
  std::vector<std::vector<uint8_t>> offers_;         // by parent rank
  std::vector<const Request*> offerReceives_;        // by parent rank; null: not a member (or this rank)
  std::shared_ptr<std::vector<uint32_t>> channels_;  // by parent rank

  // The tree (overTree() only).
  std::vector<int> sortedMembers_;
  std::size_t index_ = 0;  // this rank's, in sortedMembers_
  int treeParent_ = -1;    // parent rank; -1: this is the root
  std::vector<int> treeChildren_;
  std::vector<std::vector<uint8_t>> reports_;  // by parent rank: from the children and the tree parent
  std::vector<const Request*> reportReceives_;
  std::vector<uint8_t> upReport_;  // this rank's part of the table, or the whole table at the root
  bool reportedUp_ = false;
  // What failed the exchange, for announceFailure: two members that
  // disagree, or the report this rank was told (passed on as it came, to
  // all neighbours but its sender).
  struct Objection {
    int rankA;
    std::vector<uint8_t> offerA;
    int rankB;
    std::vector<uint8_t> offerB;
  };
  std::optional<Objection> objection_;
  std::vector<uint8_t> toldReport_;
  int toldBy_ = -1;
  std::vector<uint8_t> failureReport_;
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
