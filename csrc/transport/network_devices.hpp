#pragma once
// Which network devices UCX may use (UCX_NET_DEVICES), chosen so that a
// rank listens only where its peers can reach it: UCX's TCP transport
// otherwise opens a listener on every interface of the machine.

#include <string>

namespace ucxcoll {

// What the job looks like from this rank: the store's host as the user
// gave it, and whether every rank is known to be on this host.
struct JobLocation {
  std::string storeHost;  // empty: unknown (file store, ...)
  bool allRanksOnThisHost = false;
};

// The UCX_NET_DEVICES value for a job at `where`, or "" for UCX's default
// (every device):
// - every rank on this host (torchrun's LOCAL_WORLD_SIZE == WORLD_SIZE, or
//   a store at localhost/127.0.0.1/::1, which no other host could reach):
//   "lo" only;
// - otherwise the interface this host reaches the store's host through,
//   plus every RDMA device (their transfers open no TCP listener); a store
//   host that resolves to a loopback address here (a hostname mapped to
//   127.0.1.1) tells nothing about the other hosts: UCX's default.
std::string networkDevicesFor(const JobLocation& where);

// The name of the interface whose address this host uses to reach `host`
// ("" if it cannot be resolved or routed).
std::string interfaceReaching(const std::string& host);

}  // namespace ucxcoll
