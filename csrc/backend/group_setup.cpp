#include "backend/group_setup.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <string>

namespace ucxcoll {
namespace {

// torch hands each group a PrefixStore ("<group>/cpu/"); the counter that
// hands out group ids must live in the store all groups share.
c10::intrusive_ptr<c10d::Store> sharedStore(const c10::intrusive_ptr<c10d::Store>& store) {
  if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(store.get())) {
    return prefixed->getUnderlyingNonPrefixStore();
  }
  return store;
}

std::vector<uint8_t> toBytes(const std::string& text) {
  return {text.begin(), text.end()};
}
std::string toString(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

}  // namespace

GroupRendezvous rendezvous(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           const std::vector<uint8_t>& myAddress) {
  // A store can outlive a group (torchrun's agent store survives
  // destroy_process_group + init_process_group), so keys from an earlier
  // incarnation of the same group name may still be there. Every rank bumps
  // a join counter; ranks of the same incarnation get the same quotient.
  int64_t joined = store->add("ucxcoll/joined", 1);
  std::string prefix = "ucxcoll/" + std::to_string((joined - 1) / size) + "/";

  GroupRendezvous result;
  if (rank == 0) {
    int64_t id = sharedStore(store)->add("ucxcoll/group_counter", 1);
    result.groupId = static_cast<uint32_t>(id);
    store->set(prefix + "group_id", toBytes(std::to_string(id)));
  } else {
    result.groupId = static_cast<uint32_t>(std::stoll(toString(store->get(prefix + "group_id"))));
  }
  store->set(prefix + "address/" + std::to_string(rank), myAddress);
  result.addresses.resize(static_cast<std::size_t>(size));
  for (int peer = 0; peer < size; ++peer) {
    result.addresses[peer] = peer == rank ? myAddress : store->get(prefix + "address/" + std::to_string(peer));
  }
  return result;
}

}  // namespace ucxcoll
