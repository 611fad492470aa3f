#pragma once
// Agreeing on a group through the job's store: every rank's UCX worker
// address, the channel number its process gave the group (see
// transport/tag.hpp), which ranks share a host, and which process each
// rank is (so that the engine can watch peers on this host).
//
// What it costs: the ranks form a tree of fan-out kRendezvousFanOut over
// the store. Each rank waits for its children's parts of the table, adds
// its own entry and publishes the result under its own key; rank 0's is
// the whole table, which every rank reads once. So each rank makes at most
// kRendezvousStoreOpsPerRank store operations, whatever the group's size (a rank
// of today's gloo reads every peer's key: n - 1 reads per rank), and the
// table is complete after about log4(n) store round trips.
//
// A rank that dies while others wait for it: each rank that has children
// also publishes who it is (its process) as soon as it joins, and the rank
// waiting for it (its parent; rank 0's children for rank 0) watches its
// process where it can (this host, this pid namespace). A death is written
// in place of the dead rank's part, so the table names it and every rank
// raises at once rather than at the store's timeout. A rank on another
// host, or one that dies before it joins, is waited for like a late one.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/peer_watch.hpp"
#include "setup/key_value_store.hpp"

namespace ucxcoll {

inline constexpr int kRendezvousFanOut = 4;

// The most store operations one rank's rendezvous makes: the join counter,
// its identity, rank 0's identity (rank 0's children), its children's
// identities and parts, its own part, the whole table. A leaf makes 3 (4
// under rank 0), and three ranks in four are leaves.
inline constexpr int kRendezvousStoreOpsPerRank = 2 * kRendezvousFanOut + 5;

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

// Collective over the group's ranks; raises SettingsMismatch on every rank
// where any two differ in groupWideSettings; blocks (up to the store's
// timeout) until every rank has published its address and channel, or
// raises naming a rank that refused or died meanwhile. `myProcess` is the
// process this rank runs in (the tests, whose ranks are threads, name
// others).
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
