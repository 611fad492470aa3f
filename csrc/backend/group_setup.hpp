#pragma once
// Agreeing on a group through the store torch hands the backend: a group id
// unique in the job, and every rank's UCX worker address.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <vector>

namespace ucxcoll {

struct GroupRendezvous {
  uint32_t groupId = 0;                         // goes into every tag (16 bits used)
  std::vector<std::vector<uint8_t>> addresses;  // indexed by group rank
};

// Collective over the group's ranks; blocks (up to the store's timeout)
// until every rank has published its address.
GroupRendezvous rendezvous(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           const std::vector<uint8_t>& myAddress);

}  // namespace ucxcoll
