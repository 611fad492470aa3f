#pragma once
// Group setup with the address table carried over UCX: the store gathers
// the table up the setup tree (setup/rendezvous.hpp), and the ranks carry
// it back down the same tree themselves. Rank 0 sends it to its children,
// each of them to its own, and so on: log4(n) hops of one message, where
// reading it from the store costs the store's one server n x n entries in
// all (every rank reading all n).
//
// A rank's parent knows where to send it: its children's entries (worker
// address, channel, host) are in the table. The child waits for it on the
// channel it published for the group (a message there waits in the
// transport until received, however early). The table is forwarded before
// this rank reads it, so a refusal or a death in it reaches every rank,
// and every rank raises.
//
// Where the relay does not come, a rank reads the table from the store,
// where rank 0 also published it: at once when a rank it watches died (its
// parent, on this host, whose death it sees), and otherwise when it finds
// the table there after waiting 1, 3, 7, ... s (a parent that refused to
// take part, which publishes its refusal instead of relaying; one on
// another host that died or lost its link after publishing its part; one
// that hangs). Each look is one store operation, made only by a rank that
// has waited that long: log2(the wait) of them, however many ranks.

#include <chrono>
#include <cstdint>
#include <string>

#include "setup/key_value_store.hpp"
#include "setup/rendezvous.hpp"

namespace ucxcoll {

class Engine;

struct RelayOptions {
  // The first look at the store for a relay that has not come; each later
  // look waits twice as long as the one before.
  std::chrono::milliseconds firstStoreLook = std::chrono::seconds(1);
  // Tests: a rank that does not forward the table (its children then find
  // it in the store).
  bool forward = true;
};

// The most looks at the store a rank makes while it waits `waited` for the
// relay.
int storeLooksWithin(std::chrono::milliseconds waited, const RelayOptions& options = {});

// rendezvous() with the table relayed over `engine` (see above). `timeout`
// bounds the wait for the table once this rank's part is published.
GroupRendezvous relayedRendezvous(KeyValueStore& store, Engine& engine, int rank, int size, uint32_t myChannel,
                                  const std::string& myNetworkInterfaces, std::chrono::milliseconds timeout,
                                  const RelayOptions& options = {}, const ProcessIdentity& myProcess = thisProcess());

}  // namespace ucxcoll
