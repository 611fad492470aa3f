#pragma once
// Which network devices UCX may use (UCX_NET_DEVICES), chosen so that a
// rank listens only where its peers can reach it: UCX's TCP transport
// otherwise opens a listener on every interface of the machine, and a
// docker bridge or an interface that reaches no peer is then offered to
// peers as a way in.

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ucxcoll {

// What the job looks like from this rank: the store's host as the user
// gave it, and whether every rank is known to be on this host.
struct JobLocation {
  std::string storeHost;  // empty: unknown (file store, ...)
  bool allRanksOnThisHost = false;
};

// A network interface that is up and has an address.
struct NetworkInterface {
  std::string name;
  std::string address;  // its first IPv4 address, else its first IPv6 one
};

// What this host has: its interfaces, its RDMA ports ("mlx5_0:1") and a
// way to ask which interface reaches a host (see interfaceReaching).
// Bridges (docker0, virbr0, ...) are left out as UCX leaves them out,
// unless UCX_TCP_BRIDGE_ENABLE says otherwise.
struct HostNetwork {
  std::vector<NetworkInterface> interfaces;
  std::vector<std::string> bridges;  // left out
  std::vector<std::string> rdmaPorts;
  std::function<std::string(const std::string&)> interfaceReaching;

  static HostNetwork ofThisHost();
};

// The outcome of the choice.
struct NetworkDevices {
  // UCX_NET_DEVICES for UCX; "" leaves UCX its own (the user's
  // UCX_NET_DEVICES, or every device).
  std::string ucxValue;
  // Why these, for the log: "the interface that reaches the store's host ...".
  std::string reason;
  // The devices in use and their addresses, "eth0 10.0.0.7, mlx5_0:1": what
  // peers are offered, for errors that say why a peer cannot be reached.
  std::string inUse;
  // How many devices one large message may be split across (UCX's rails):
  // the number the user listed in UCXCOLL_NET_DEVICES; 1 (UCX's defaults
  // stand) for every automatic choice, which may mix a TCP interface with
  // RDMA ports, or interfaces that reach no peer.
  int rails = 1;
};

// The choice, in this order:
// - UCXCOLL_NET_DEVICES (`setting`, an NCCL-style list, see
//   common/interface_list.hpp): the devices it selects, over the user's
//   UCX_NET_DEVICES;
// - the user's UCX_NET_DEVICES (`ucxSetting`): left to UCX as it is;
// - every rank on this host (torchrun's LOCAL_WORLD_SIZE == WORLD_SIZE, or
//   a store at localhost/127.0.0.1/::1, which no other host could reach):
//   "lo" only;
// - the interface this host reaches the store's host through, plus every
//   RDMA port (their transfers open no TCP listener);
// - where the store's host tells nothing (unknown, or a name that resolves
//   to a loopback address here, as a hostname mapped to 127.0.1.1 does):
//   every device but loopback and docker bridges, as NCCL does.
// Throws std::invalid_argument when a setting selects no device this host
// has, or an exact name it does not have.
NetworkDevices chooseNetworkDevices(const JobLocation& where, const std::string& setting,
                                    const std::optional<std::string>& ucxSetting, const HostNetwork& host);

// The same for this process: its configuration, environment and host.
NetworkDevices networkDevicesFor(const JobLocation& where);

// The name of the interface whose address this host uses to reach `host`
// ("" if it cannot be resolved or routed).
std::string interfaceReaching(const std::string& host);

}  // namespace ucxcoll
