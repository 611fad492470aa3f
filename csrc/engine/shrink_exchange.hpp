#pragma once
// The one exchange a shrink needs (torch's shrink_group): every rank that
// goes on tells every other one, over the parent group's own connections,
// the channel it opened for the smaller group and which ranks it excludes.
// No store is involved: the parent already knows how to reach everyone.
//
// It runs on a parent that has failed (the usual reason to shrink is a
// dead rank), as a transfer of that group: a survivor that dies meanwhile,
// or closes the parent instead of shrinking it, fails the exchange at once,
// naming it. Survivors that pass different exclusion lists all raise,
// naming each other's lists: they must not build groups that disagree about
// who is in them.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/operation.hpp"

namespace ucxcoll {

class ShrinkExchange final : public Operation {
 public:
  // `excluded`: parent ranks that leave, ascending, without this one;
  // `round`: how many shrinks of this parent this rank made before (the
  // survivors count alike); `channel`: the one this process opened for the
  // new group. Once it succeeded, `channels` holds, by parent rank, each
  // survivor's channel for the new group (0 for excluded ranks); shared
  // with the caller, who may read it after the engine destroyed this.
  ShrinkExchange(std::shared_ptr<Group> parent, std::vector<int> excluded, uint32_t round, uint32_t channel,
                 std::chrono::milliseconds timeout, std::shared_ptr<std::vector<uint32_t>> channels);

  // "[1, 3]".
  static std::string formatRanks(const std::vector<int>& ranks);
  // The offer this rank sends (for ShrinkNotice).
  const std::vector<uint8_t>& offer() const { return mine_; }
  uint32_t round() const { return round_; }

 protected:
  Task run() override;
  std::string describe() const override;
  std::exception_ptr checkForDisagreement(Transport& transport) override;

 private:
  // What each survivor sends (the round is in the tag): its new channel,
  // then the parent ranks it excludes as a bitmap (one bit per parent
  // rank, so that every offer has the same size whatever the list).
  std::vector<uint8_t> encodeOffer() const;
  std::size_t offerBytes() const;
  std::vector<int> excludedIn(const std::vector<uint8_t>& offer) const;
  bool survives(int rank) const;

  std::vector<int> excluded_;
  uint32_t round_;
  uint32_t channel_;
  std::vector<uint8_t> mine_;
  std::vector<std::vector<uint8_t>> offers_;         // by parent rank
  std::shared_ptr<std::vector<uint32_t>> channels_;  // by parent rank
};

// The same offer, sent to the excluded ranks that are still there (not
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
