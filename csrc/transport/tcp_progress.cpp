#include "transport/tcp_progress.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/tcp.h>  // tcp_info with the byte counters (glibc's has none)
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <sstream>

namespace ucxcoll {
namespace {

// The peer address of socket `fd` as a literal; "" where it is not a
// connected IPv4/IPv6 socket.
std::string peerAddressOf(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) {
    return "";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, text, sizeof(text));
  } else if (peer.ss_family == AF_INET6) {
    const auto& address = reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr;
    // An IPv4 peer on a dual-stack socket: compare its IPv4 form.
    if (IN6_IS_ADDR_V4MAPPED(&address)) {
      inet_ntop(AF_INET, &address.s6_addr[12], text, sizeof(text));
    } else {
      inet_ntop(AF_INET6, &address, text, sizeof(text));
    }
  }
  return text;
}

}  // namespace

std::map<std::string, uint64_t> tcpBytesByPeerAddress() {
  std::map<std::string, uint64_t> bytes;
  const std::unique_ptr<DIR, int (*)(DIR*)> directory(opendir("/proc/self/fd"), &closedir);
  if (!directory) {
    return bytes;
  }
  while (const dirent* entry = readdir(directory.get())) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(directory.get())) {
      continue;
    }
    const std::string peer = peerAddressOf(static_cast<int>(fd));
    struct tcp_info info {};
    socklen_t length = sizeof(info);
    if (peer.empty() || getsockopt(static_cast<int>(fd), IPPROTO_TCP, TCP_INFO, &info, &length) != 0) {
      continue;
    }
    bytes[peer] += info.tcpi_bytes_acked + info.tcpi_bytes_received;
  }
  return bytes;
}

std::vector<std::string> addressesOfDevices(const std::string& devices) {
  std::vector<std::string> addresses;
  std::istringstream items(devices);
  std::string item;
  while (std::getline(items, item, ',')) {
    std::istringstream words(item);
    std::string name;
    std::string address;
    if (words >> name >> address) {
      addresses.push_back(address);
    }
  }
  return addresses;
}

}  // namespace ucxcoll
