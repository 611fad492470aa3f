#include "backend/group_setup.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace ucxcoll {

GroupRendezvous rendezvous(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           const std::vector<uint8_t>& myAddress, uint32_t myChannel) {
  // A store can outlive a group (torchrun's agent store survives
  // destroy_process_group + init_process_group), so keys from an earlier
  // incarnation of the same group name may still be there. Every rank bumps
  // a join counter; ranks of the same incarnation get the same quotient.
  int64_t joined = store->add("ucxcoll/joined", 1);
  std::string prefix = "ucxcoll/" + std::to_string((joined - 1) / size) + "/";

  // Value: the channel (4 bytes, little-endian), then the worker address.
  std::vector<uint8_t> mine(4 + myAddress.size());
  for (int byte = 0; byte < 4; ++byte) {
    mine[byte] = static_cast<uint8_t>(myChannel >> (8 * byte));
  }
  std::memcpy(mine.data() + 4, myAddress.data(), myAddress.size());
  store->set(prefix + "peer/" + std::to_string(rank), mine);

  GroupRendezvous result;
  for (int peer = 0; peer < size; ++peer) {
    std::vector<uint8_t> value = peer == rank ? mine : store->get(prefix + "peer/" + std::to_string(peer));
    if (value.size() < 4) {
      throw std::runtime_error("malformed rendezvous entry of rank " + std::to_string(peer));
    }
    uint32_t channel = 0;
    for (int byte = 0; byte < 4; ++byte) {
      channel |= static_cast<uint32_t>(value[byte]) << (8 * byte);
    }
    result.channels.push_back(channel);
    result.addresses.emplace_back(value.begin() + 4, value.end());
  }
  return result;
}

}  // namespace ucxcoll
