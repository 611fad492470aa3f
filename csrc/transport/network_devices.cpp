#include "transport/network_devices.hpp"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>

#include "common/file_descriptor.hpp"

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

// "mlx5_0:1,mlx5_1:1": every port of every RDMA device.
std::string rdmaDevices() {
  std::string devices;
  std::error_code error;
  for (const auto& device : std::filesystem::directory_iterator("/sys/class/infiniband", error)) {
    std::error_code portsError;
    for (const auto& port : std::filesystem::directory_iterator(device.path() / "ports", portsError)) {
      devices +=
          (devices.empty() ? "" : ",") + device.path().filename().string() + ":" + port.path().filename().string();
    }
  }
  return devices;
}

}  // namespace

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
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) {
    return "";
  }
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owned(interfaces, &freeifaddrs);
  for (const ifaddrs* entry = interfaces; entry != nullptr; entry = entry->ifa_next) {
    if (sameAddress(entry->ifa_addr, reinterpret_cast<const sockaddr*>(&local))) {
      return entry->ifa_name;
    }
  }
  return "";
}

std::string networkDevicesFor(const JobLocation& where) {
  if (where.allRanksOnThisHost || isLoopbackName(where.storeHost)) {
    return "lo";
  }
  if (where.storeHost.empty()) {
    return "";
  }
  std::string interface = interfaceReaching(where.storeHost);
  if (interface.empty() || interface == "lo") {
    return "";
  }
  std::string rdma = rdmaDevices();
  return rdma.empty() ? interface : interface + "," + rdma;
}

}  // namespace ucxcoll
