#pragma once
// Agreeing on a group through the job's store: every rank's UCX worker
// address, the channel number its process gave the group (see
// transport/tag.hpp), which ranks share a host, and which process each
// rank is (so that the engine can watch peers on this host).
//
// What it costs: the ranks form a tree of fan-out kRendezvousFanOut over
// the store. Each rank waits for its children's parts of the table, adds
// its own entry and publishes the result under its own key; rank 0's is
// the whole table, and the table is complete after about log4(n) store
// round trips. Then the table travels down the same tree over UCX, each
// rank forwarding it to its children (setup/table_relay.hpp), so each rank
// makes at most kRendezvousStoreOpsPerRank store operations and reads its
// children's parts, never the whole table (rank 0 reads its subtree, the
// whole table; a rank of today's gloo reads every peer's key: n - 1 reads
// per rank, n x n entries through the store in all). rendezvous() below is
// the same without the relay: every rank reads the table from the store.
//
// A rank that dies while others wait for it: each rank that has children
// also publishes who it is (its process) as soon as it joins, and the ranks
// waiting for it (its parent, for its part; its children, for the table)
// watch its process where they can (this host, this pid namespace). A
// death is written in place of the dead rank's part, so the table names it
// and every rank raises at once rather than at the store's timeout. A rank
// on another host, or one that dies before it joins, is waited for like a
// late one.

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/peer_watch.hpp"
#include "setup/key_value_store.hpp"

namespace ucxcoll {

inline constexpr int kRendezvousFanOut = 4;

// The most store operations one rank's rendezvous makes: the join counter,
// its identity, its parent's identity, its children's identities and parts,
// its own part, the whole table (read from the store by rendezvous(), by a
// relay only where the relay does not come: a parent that died or cannot
// reach it; such a rank then also says that it took the table from the
// store, and one that waits long looks whether the table is there, 1, 3,
// 7, ... s into the wait: setup/table_relay.hpp). A leaf makes 3 (4 with
// the table from the store), and three ranks in four are leaves.
inline constexpr int kRendezvousStoreOpsPerRank = 2 * kRendezvousFanOut + 6;

struct GroupRendezvous {
  std::vector<std::vector<uint8_t>> addresses;  // indexed by group rank
  std::vector<uint32_t> channels;               // indexed by group rank
  // Indexed by group rank: the rank's process where this one can watch it
  // (same kernel and pid namespace), unknown elsewhere.
  std::vector<ProcessIdentity> processes;
  std::vector<bool> onOtherHost;       // indexed by group rank
  std::vector<std::string> hostNames;  // indexed by group rank: each rank's hostname
  // Indexed by group rank: its host, numbered by the host identity (the
  // kernel's boot id) in the order of each host's first rank; the same on
  // every rank (Group::setHosts).
  std::vector<int> hosts;
  // Indexed by group rank: the network devices its UCX offers, with their
  // addresses (Engine::networkInterfaces), for errors about reaching it.
  std::vector<std::string> networkInterfaces;
  int ranksOnThisHost = 1;  // this one included
  // Some host runs more of the group's ranks than the cores each of them
  // may use: the same answer on every rank (computed from every entry).
  bool ranksOutnumberCores = false;
};

// The ranks of a group do not share groupWideSettings (common/config.hpp).
class SettingsMismatch : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The rendezvous in two halves, for a caller that carries the finished
// table down the tree itself (setup/table_relay.hpp: over UCX, parent to
// children) instead of having every rank read all n entries from the
// store. Rank 0 still publishes the table, where a rank whose parent
// cannot relay it (dead, on a host that lost its link) reads it.
class TreeRendezvous {
 public:
  // Joins: publishes this rank's entry and, once its children's parts are
  // in, its part of the table (the whole table at rank 0). Blocks for the
  // children (up to the store's timeout). `myProcess` is the process this
  // rank runs in (the tests, whose ranks are threads, name others).
  TreeRendezvous(KeyValueStore& store, int rank, int size, const std::vector<uint8_t>& myAddress, uint32_t myChannel,
                 const std::string& myNetworkInterfaces, const ProcessIdentity& myProcess = thisProcess());
  ~TreeRendezvous();
  TreeRendezvous(const TreeRendezvous&) = delete;
  TreeRendezvous& operator=(const TreeRendezvous&) = delete;

  // The rank this one gets the table from: its parent in the tree; -1 at
  // rank 0.
  int parent() const;
  // A random number in this rank's entry (below kMaxRelayKey) that the
  // relay's messages to it carry: a table sent for another rendezvous (an
  // earlier group on the same channel) never matches its receive.
  uint32_t relayKey() const { return relayKey_; }
  static constexpr uint32_t kMaxRelayKey = (1u << 25) - 1;
  // Rank 0's: the whole table. Empty at other ranks.
  const std::vector<uint8_t>& ownTable() const { return ownTable_; }
  // Whether rank 0 has published the table in the store (one store
  // operation; a store that cannot tell says yes).
  bool tableInStore();
  // The table from the store, waiting for it (up to the store's timeout).
  std::vector<uint8_t> readTable();
  // A rank that took the table from the store says so (its parent, which
  // could not send it, may hold the store and be about to raise), and its
  // parent asks whether `child` has.
  void noteTableTaken();
  bool childTookTable(int child);
  // Whether a rank this one watches (its parent, children with children)
  // died; its death is then in the store, and the table may never be
  // relayed.
  bool sawDeath() const;
  // `listener` is called once such a death is in the store (on the watch's
  // thread, or at once if one is already); empty: stop calling.
  void setDeathListener(std::function<void()> listener);

  // This rank's children that the table should go to, from the table:
  // those with an entry (one that refused or died has nobody to send to).
  struct Child {
    int rank;
    uint32_t channel;
    uint32_t relayKey;
    bool onOtherHost;
    std::vector<uint8_t> address;
  };
  std::vector<Child> children(const std::vector<uint8_t>& table) const;

  // What the whole table says. Raises on every rank that reads it where a
  // rank refused or died (naming it), or where any two ranks differ in
  // groupWideSettings (SettingsMismatch).
  GroupRendezvous finish(const std::vector<uint8_t>& table);

 private:
  struct State;
  const int rank_;
  const int size_;
  const std::string host_;          // this host's identity
  const std::string pidNamespace_;  // this process's pid namespace's
  const uint32_t relayKey_;
  std::vector<uint8_t> ownTable_;
  std::unique_ptr<State> state_;
};

// The whole rendezvous through the store alone: TreeRendezvous, every
// rank but 0 reading the table from the store (n entries each).
// Collective over the group's ranks; raises SettingsMismatch on every rank
// where any two differ in groupWideSettings; blocks (up to the store's
// timeout) until every rank has published its address and channel, or
// raises naming a rank that refused or died meanwhile.
GroupRendezvous rendezvous(KeyValueStore& store, int rank, int size, const std::vector<uint8_t>& myAddress,
                           uint32_t myChannel, const std::string& myNetworkInterfaces,
                           const ProcessIdentity& myProcess = thisProcess());

// What a rendezvous found, narrowed to `ranks` (ranks of that group,
// ascending, which become ranks 0, 1, ... of the new one) with
// `channels[r]` as rank r's channel for the new group: a group made from
// a parent's connections without the store (shrink, split, new_group).
// Hosts are renumbered alike on every rank; ranksOutnumberCores stays the
// parent's, which every rank shares.
GroupRendezvous narrowRendezvous(const GroupRendezvous& peers, const std::vector<int>& ranks,
                                 const std::vector<uint32_t>& channels);

// For a rank that cannot take part in the rendezvous (a setting it cannot
// use, no UCX): publishes `why` in place of its entry, so that every other
// rank's rendezvous raises at once, naming this rank and its host, instead
// of waiting for the store's timeout. Best effort: a store that fails here
// leaves the peers to that timeout.
void publishSetupFailure(KeyValueStore& store, int rank, int size, const std::string& why);

// Why a group cannot be set up when no network device of this host reaches
// `ranks` (UnreachableError): each of them with its host and the devices it
// offers, the devices this rank offers (`mine`), and what to do.
std::string describeUnreachable(const std::vector<int>& ranks, const GroupRendezvous& peers, const std::string& mine);

}  // namespace ucxcoll
