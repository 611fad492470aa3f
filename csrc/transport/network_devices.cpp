#include "transport/network_devices.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "common/config.hpp"
#include "common/file_descriptor.hpp"
#include "common/interface_list.hpp"

namespace ucxcoll {

namespace {

bool isLoopbackName(std::string_view host) {
  return host == "localhost" || host == "127.0.0.1" || host == "::1" || host == "[::1]";
}

bool sameAddress(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) {
    return false;
  }
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

std::string addressText(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = address->sa_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(address)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
  return inet_ntop(address->sa_family, raw, text, sizeof(text)) != nullptr ? text : "";
}

bool isBridge(const std::string& interface) {
  std::error_code error;
  return std::filesystem::exists("/sys/class/net/" + interface + "/bridge", error);
}

// A UCX boolean setting (y/yes/on/1 in any case) that is set to true.
bool ucxFlagSet(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    return false;
  }
  std::string lower;
  for (const char* at = value; *at != '\0'; ++at) {
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(*at)));
  }
  return lower == "y" || lower == "yes" || lower == "on" || lower == "1" || lower == "true";
}

using Ifaddrs = std::unique_ptr<ifaddrs, decltype(&freeifaddrs)>;

Ifaddrs interfaceAddresses() {
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) {
    interfaces = nullptr;
  }
  return Ifaddrs(interfaces, &freeifaddrs);
}

// Every port of every RDMA device: "mlx5_0:1".
std::vector<std::string> rdmaPortsOfThisHost() {
  std::vector<std::string> ports;
  std::error_code error;
  for (const auto& device : std::filesystem::directory_iterator("/sys/class/infiniband", error)) {
    std::error_code portsError;
    for (const auto& port : std::filesystem::directory_iterator(device.path() / "ports", portsError)) {
      ports.push_back(device.path().filename().string() + ":" + port.path().filename().string());
    }
  }
  return ports;
}

std::vector<std::string> deviceNames(const HostNetwork& host) {
  std::vector<std::string> names;
  for (const NetworkInterface& interface : host.interfaces) {
    names.push_back(interface.name);
  }
  names.insert(names.end(), host.rdmaPorts.begin(), host.rdmaPorts.end());
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) {
    text += (text.empty() ? "" : ",") + name;
  }
  return text;
}

// "eth0 10.0.0.7, mlx5_0:1" for the devices of `host` that `list` selects.
std::string describe(const HostNetwork& host, const InterfaceList& list) {
  std::string text;
  for (const NetworkInterface& interface : host.interfaces) {
    if (list.matches(interface.name)) {
      text += (text.empty() ? "" : ", ") + interface.name + " " + interface.address;
    }
  }
  for (const std::string& port : host.rdmaPorts) {
    if (list.matches(port)) {
      text += (text.empty() ? "" : ", ") + port;
    }
  }
  return text.empty() ? "no network device" : text;
}

std::string hostHas(const HostNetwork& host) {
  std::string text;
  for (const std::string& name : deviceNames(host)) {
    text += (text.empty() ? "" : ", ") + name;
  }
  text = "this host has " + (text.empty() ? std::string("none") : text);
  if (!host.bridges.empty()) {
    std::string bridges;
    for (const std::string& name : host.bridges) {
      bridges += (bridges.empty() ? "" : ", ") + name;
    }
    text += "; UCX leaves out the bridge" + std::string(host.bridges.size() == 1 ? " " : "s ") + bridges +
            " unless UCX_TCP_BRIDGE_ENABLE=y";
  }
  return text;
}

// The devices an NCCL-style list selects: their names joined by commas, as
// UCX_NET_DEVICES takes them.
std::vector<std::string> selected(const HostNetwork& host, const InterfaceList& list) {
  std::vector<std::string> names;
  for (const std::string& name : deviceNames(host)) {
    if (list.matches(name)) {
      names.push_back(name);
    }
  }
  return names;
}

NetworkDevices exactly(const HostNetwork& host, const std::vector<std::string>& names, std::string reason) {
  InterfaceList list{.exclude = false, .exact = true, .names = names};
  return {joined(names), std::move(reason), describe(host, list)};
}

NetworkDevices fromSetting(const HostNetwork& host, const std::string& setting) {
  const std::optional<InterfaceList> list = parseInterfaceList(setting);
  if (!list) {
    throw std::invalid_argument("UCXCOLL_NET_DEVICES=" + setting + " is not an interface list");
  }
  if (list->exact && !list->exclude) {
    const std::vector<std::string> names = deviceNames(host);
    for (const std::string& name : list->names) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        throw std::invalid_argument("UCXCOLL_NET_DEVICES=" + setting + " names " + name +
                                    ", which is not a network device of this host that is up and has an address (" +
                                    hostHas(host) + ")");
      }
    }
  }
  std::vector<std::string> names = selected(host, *list);
  if (names.empty()) {
    throw std::invalid_argument("UCXCOLL_NET_DEVICES=" + setting +
                                " selects none of this host's network devices that are up and have an address (" +
                                hostHas(host) + ")");
  }
  NetworkDevices chosen = exactly(host, names, "UCXCOLL_NET_DEVICES=" + setting);
  chosen.rails = static_cast<int>(names.size());
  return chosen;
}

}  // namespace

HostNetwork HostNetwork::ofThisHost() {
  HostNetwork host;
  const bool bridgesEnabled = ucxFlagSet("UCX_TCP_BRIDGE_ENABLE");
  std::map<std::string, std::string> ipv6;  // name -> first IPv6 address, for those without IPv4
  Ifaddrs addresses = interfaceAddresses();
  for (const ifaddrs* entry = addresses.get(); entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || (entry->ifa_flags & IFF_UP) == 0) {
      continue;
    }
    const int family = entry->ifa_addr->sa_family;
    if ((family == AF_INET || family == AF_INET6) && !bridgesEnabled && isBridge(entry->ifa_name)) {
      if (std::find(host.bridges.begin(), host.bridges.end(), entry->ifa_name) == host.bridges.end()) {
        host.bridges.push_back(entry->ifa_name);
      }
      continue;
    }
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr)->sin6_addr)) {
      continue;  // every interface has one; UCX connects over none of them
    }
    if (family == AF_INET) {
      auto known = std::find_if(host.interfaces.begin(), host.interfaces.end(),
                                [&](const NetworkInterface& interface) { return interface.name == entry->ifa_name; });
      if (known == host.interfaces.end()) {
        host.interfaces.push_back({entry->ifa_name, addressText(entry->ifa_addr)});
      }
    } else if (family == AF_INET6) {
      ipv6.emplace(entry->ifa_name, addressText(entry->ifa_addr));
    }
  }
  for (const auto& [name, address] : ipv6) {
    auto known = std::find_if(host.interfaces.begin(), host.interfaces.end(),
                              [&](const NetworkInterface& interface) { return interface.name == name; });
    if (known == host.interfaces.end()) {
      host.interfaces.push_back({name, address});
    }
  }
  host.rdmaPorts = rdmaPortsOfThisHost();
  host.interfaceReaching = [](const std::string& name) { return ucxcoll::interfaceReaching(name); };
  return host;
}

std::string interfaceReaching(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  std::string bare =
      host.size() > 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
  if (getaddrinfo(bare.c_str(), "9", &hints, &found) != 0 || found == nullptr) {
    return "";
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> resolved(found, &freeaddrinfo);
  // Connecting a UDP socket sends nothing; it only asks the kernel for the
  // route, whose source address getsockname() then reports.
  FileDescriptor probe(socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (probe.get() < 0 || connect(probe.get(), found->ai_addr, found->ai_addrlen) != 0) {
    return "";
  }
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    return "";
  }
  Ifaddrs addresses = interfaceAddresses();
  for (const ifaddrs* entry = addresses.get(); entry != nullptr; entry = entry->ifa_next) {
    if (sameAddress(entry->ifa_addr, reinterpret_cast<const sockaddr*>(&local))) {
      return entry->ifa_name;
    }
  }
  return "";
}

namespace {
constexpr const char* kOthers = "; UCXCOLL_NET_DEVICES chooses others";
}  // namespace

NetworkDevices chooseNetworkDevices(const JobLocation& where, const std::string& setting,
                                    const std::optional<std::string>& ucxSetting, const HostNetwork& host) {
  if (!setting.empty()) {
    return fromSetting(host, setting);
  }
  if (ucxSetting) {
    const InterfaceList list = parseUcxDeviceList(*ucxSetting);
    if (selected(host, list).empty()) {
      throw std::invalid_argument("UCX_NET_DEVICES=" + *ucxSetting +
                                  " selects none of this host's network devices that are up and have an address (" +
                                  hostHas(host) + ")");
    }
    return {"", "UCX_NET_DEVICES=" + *ucxSetting, describe(host, list)};
  }
  if (where.allRanksOnThisHost || isLoopbackName(where.storeHost)) {
    return exactly(host, {"lo"}, std::string("every rank runs on this host") + kOthers);
  }
  if (!where.storeHost.empty()) {
    const std::string interface = host.interfaceReaching ? host.interfaceReaching(where.storeHost) : "";
    if (!interface.empty() && interface != "lo") {
      std::vector<std::string> names{interface};
      names.insert(names.end(), host.rdmaPorts.begin(), host.rdmaPorts.end());
      return exactly(host, names, "the interface that reaches the store's host " + where.storeHost + kOthers);
    }
  }
  const std::vector<std::string> names = selected(host, *parseInterfaceList("^docker,lo"));
  if (names.empty()) {
    return {"", std::string("UCX's default: this host has no device but loopback and docker ones") + kOthers,
            describe(host, parseUcxDeviceList("all"))};
  }
  return exactly(host, names,
                 std::string("every device but loopback and docker ones: the store's host tells nothing") + kOthers);
}

NetworkDevices networkDevicesFor(const JobLocation& where) {
  const char* ucx = std::getenv("UCX_NET_DEVICES");
  std::optional<std::string> ucxSetting;
  if (ucx != nullptr && *ucx != '\0') {
    ucxSetting = ucx;
  }
  return chooseNetworkDevices(where, config().networkDevices, ucxSetting, HostNetwork::ofThisHost());
}

}  // namespace ucxcoll
