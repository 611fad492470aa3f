#include "backend/group_setup.hpp"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

namespace ucxcoll {
namespace {

// Ranks whose processes run under one kernel share its boot id: the
// machine (or VM) whose cores they share. The hostname stands in where the
// boot id cannot be read.
std::string hostIdentity() {
  std::ifstream bootId("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (std::getline(bootId, id) && !id.empty()) {
    return id;
  }
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

void putUint(std::vector<uint8_t>& out, uint32_t value, int bytes) {
  for (int byte = 0; byte < bytes; ++byte) {
    out.push_back(static_cast<uint8_t>(value >> (8 * byte)));
  }
}

uint32_t getUint(const std::vector<uint8_t>& in, std::size_t at, int bytes) {
  uint32_t value = 0;
  for (int byte = 0; byte < bytes; ++byte) {
    value |= static_cast<uint32_t>(in.at(at + static_cast<std::size_t>(byte))) << (8 * byte);
  }
  return value;
}

}  // namespace

GroupRendezvous rendezvous(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           const std::vector<uint8_t>& myAddress, uint32_t myChannel) {
  // A store can outlive a group (torchrun's agent store survives
  // destroy_process_group + init_process_group), so keys from an earlier
  // incarnation of the same group name may still be there. Every rank bumps
  // a join counter; ranks of the same incarnation get the same quotient.
  int64_t joined = store->add("ucxcoll/joined", 1);
  std::string prefix = "ucxcoll/" + std::to_string((joined - 1) / size) + "/";

  // Value: the channel (4 bytes, little-endian), the host identity's length
  // (2 bytes) and bytes, then the worker address.
  const std::string host = hostIdentity();
  std::vector<uint8_t> mine;
  putUint(mine, myChannel, 4);
  putUint(mine, static_cast<uint32_t>(host.size()), 2);
  mine.insert(mine.end(), host.begin(), host.end());
  mine.insert(mine.end(), myAddress.begin(), myAddress.end());
  store->set(prefix + "peer/" + std::to_string(rank), mine);

  GroupRendezvous result;
  result.ranksOnThisHost = 0;
  for (int peer = 0; peer < size; ++peer) {
    std::vector<uint8_t> value = peer == rank ? mine : store->get(prefix + "peer/" + std::to_string(peer));
    if (value.size() < 6 || value.size() < 6 + getUint(value, 4, 2)) {
      throw std::runtime_error("malformed rendezvous entry of rank " + std::to_string(peer));
    }
    const std::size_t hostLength = getUint(value, 4, 2);
    result.channels.push_back(getUint(value, 0, 4));
    if (std::string(value.begin() + 6, value.begin() + 6 + static_cast<long>(hostLength)) == host) {
      ++result.ranksOnThisHost;
    }
    result.addresses.emplace_back(value.begin() + 6 + static_cast<long>(hostLength), value.end());
  }
  return result;
}

}  // namespace ucxcoll
