#pragma once
// Interface lists as NCCL_SOCKET_IFNAME writes them, for UCXCOLL_NET_DEVICES:
//   "eth,ib"      names that start with "eth" or "ib"
//   "=eth0"       exactly eth0 (the "=" makes every name of the list exact)
//   "^docker,lo"  every name except those starting with "docker" or "lo"
//   "^=eth1"      every name except exactly eth1
// Names are compared with whole device names as UCX lists them: an
// interface ("eth0") or an RDMA port ("mlx5_0:1").

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ucxcoll {

struct InterfaceList {
  bool exclude = false;  // "^": the names say what not to use
  bool exact = false;    // "=": whole names, not prefixes
  std::vector<std::string> names;

  bool matches(std::string_view device) const;
};

// nullopt when `text` is no such list (empty, an empty name, only "^").
std::optional<InterfaceList> parseInterfaceList(std::string_view text);

// UCX_NET_DEVICES in UCX's own syntax: "all", or exact names, or "^" and
// exact names to leave out.
InterfaceList parseUcxDeviceList(std::string_view text);

}  // namespace ucxcoll
