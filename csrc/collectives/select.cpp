// Algorithm choice: one table per collective. Each row is an algorithm with
// the name its UCXCOLL_*_ALGO variable gives it, whether it can run on this
// group and call at all, and whether `auto` takes it. UCXCOLL_*_ALGO=<name>
// takes that row where it can run; `auto`, or a forced algorithm that
// cannot run here (a hierarchical one on one host), takes the first row in
// table order that can run and that auto takes. The last row of each table
// runs everywhere, so there is always a choice. Latency-bound (small)
// messages take the one-round direct exchanges, bandwidth-bound (large)
// ones the rings and chains, groups across hosts the hierarchical
// compositions where they measured faster. A composition's phases choose
// from the same table without its composed rows.
//
// Every rank of a group has the same settings (compared at setup), the
// same topology and, for a collective, the same sizes: all choose alike.
// common/config.cpp checks the values; test_select.cpp checks that it
// accepts exactly the names in these tables.

#include <algorithm>
#include <array>
#include <stdexcept>

#include "collectives/collective.hpp"
#include "collectives/staging.hpp"
#include "common/config.hpp"

namespace ucxcoll {
namespace {

template <class Call>
struct Algorithm {
  const char* name;
  // Runs its phases on rank views: not inside another composition's phase.
  bool composed;
  bool (*runs)(const Collective&, const Call&);
  bool (*autoTakes)(const Collective&, const Call&);
  Task (*start)(Collective&, const Call&);
};

enum class Rows { All, FlatOnly };

template <class Call, std::size_t N>
Task choose(const std::array<Algorithm<Call>, N>& table, const std::string& forced, Rows rows, Collective& c,
            const Call& call) {
  auto usable = [&](const Algorithm<Call>& row) { return (rows == Rows::All || !row.composed) && row.runs(c, call); };
  for (const Algorithm<Call>& row : table) {
    if (forced == row.name && usable(row)) {
      return row.start(c, call);
    }
  }
  for (const Algorithm<Call>& row : table) {
    if (usable(row) && row.autoTakes(c, call)) {
      return row.start(c, call);
    }
  }
  throw std::logic_error("algorithm selection: no row of the table takes this call");
}

bool small(std::size_t bytes) {
  return bytes <= config().smallMessageBytes;
}
bool always(const Collective&, const auto&) {
  return true;
}
bool never(const Collective&, const auto&) {
  return false;
}
bool acrossHosts(const Collective& c, const auto&) {
  return c.group()->topology().hierarchical() && c.group()->layout().fitsPhases();
}

// ---- all_gather ----------------------------------------------------------
struct AllgatherCall {
  const void* input;
  std::span<void* const> outputs;
  std::size_t bytes;
};
// The composition from kHierarchicalAllgatherMinBytes a rank: each block
// crosses to each other host once, where the flat ring carries n - 1
// blocks over each host boundary (2 against 3 each way on 2 hosts of 2
// ranks). Measured on two simulated hosts of 2 ranks (2026-12-07,
// bench_collectives.py --hosts 2 --nproc 2): with the links limited to 400
// Mbit/s, so that the link is the bound as between real hosts, 1.51x,
// 1.48x and 1.20x the flat ring at 1, 16 and 64 MiB; unshaped, where the
// 2 cores that carry the ranks and both TCP stacks are the bound, even at
// 64 KiB (399-547 against 396-410 us) and ahead from 256 KiB (869-904
// against 1079-1100 us, 4 MiB 12.5-14.9 against 15.7 ms, 16 MiB 51
// against 59 ms, 64 MiB 222 against 249 ms).
bool largeAllgather(const Collective&, const AllgatherCall& a) {
  return a.bytes >= kHierarchicalAllgatherMinBytes;
}
const std::array<Algorithm<AllgatherCall>, 4> kAllgather{{
    {"hierarchical", true, acrossHosts, largeAllgather,
     [](Collective& c, const AllgatherCall& a) { return allgatherHierarchical(c, a.input, a.outputs, a.bytes); }},
    {"direct", false, always, [](const Collective&, const AllgatherCall& a) { return small(a.bytes); },
     [](Collective& c, const AllgatherCall& a) { return allgatherDirect(c, a.input, a.outputs, a.bytes); }},
    {"chunked", false, always, [](const Collective&, const AllgatherCall& a) { return worthStaging(a.bytes); },
     [](Collective& c, const AllgatherCall& a) { return allgatherChunkedRing(c, a.input, a.outputs, a.bytes); }},
    {"ring", false, always, always,
     [](Collective& c, const AllgatherCall& a) { return allgatherRing(c, a.input, a.outputs, a.bytes); }},
}};

// ---- broadcast -----------------------------------------------------------
struct BroadcastCall {
  void* buffer;
  std::size_t bytes;
  int root;
};
// The chain pays a round to connect its links; from the size where staging
// pays off it is faster than the tree at any group size. The composition
// only where asked for: where each host's ranks are consecutive (as
// torchrun places them) the tree and the chain already cross to each host
// once, and the chain pipelines across the hosts where the composition
// runs its phases one after the other: on the rig 1 MiB 2.3 against 1.0
// ms, 64 MiB 72 against 64 ms.
const std::array<Algorithm<BroadcastCall>, 3> kBroadcast{{
    {"hierarchical", true, acrossHosts, never,
     [](Collective& c, const BroadcastCall& a) { return broadcastHierarchical(c, a.buffer, a.bytes, a.root); }},
    {"pipelined", false, always, [](const Collective&, const BroadcastCall& a) { return worthStaging(a.bytes); },
     [](Collective& c, const BroadcastCall& a) { return broadcastPipelined(c, a.buffer, a.bytes, a.root); }},
    {"binomial", false, always, always,
     [](Collective& c, const BroadcastCall& a) { return broadcastBinomial(c, a.buffer, a.bytes, a.root); }},
}};

// ---- all_reduce ----------------------------------------------------------
struct AllreduceCall {
  void* buffer;
  std::size_t count;
  DataType type;
  Reduction reduction;
  std::size_t bytes() const { return count * elementSize(type); }
};
// Across hosts with several ranks on each, past the small messages: the
// hierarchical composition (it won at every size from 64 KiB on the rig).
// Small messages in groups of more than kDirectAllreduceMaxRanks: recursive
// doubling, log2(n) rounds of one message where the direct exchange sends
// n - 1 (in the 1,024-rank start-up simulation the direct exchange's
// million messages were the first all_reduce's cost).
constexpr int kDirectAllreduceMaxRanks = 32;
const std::array<Algorithm<AllreduceCall>, 4> kAllreduce{{
    {"hierarchical", true, acrossHosts, [](const Collective&, const AllreduceCall& a) { return !small(a.bytes()); },
     [](Collective& c, const AllreduceCall& a) {
       return allreduceHierarchical(c, a.buffer, a.count, a.type, a.reduction);
     }},
    {"recursive_doubling", false, always,
     [](const Collective& c, const AllreduceCall& a) {
       return small(a.bytes()) && c.size() > kDirectAllreduceMaxRanks;
     },
     [](Collective& c, const AllreduceCall& a) {
       return allreduceRecursiveDoubling(c, a.buffer, a.count, a.type, a.reduction);
     }},
    {"direct", false, always, [](const Collective&, const AllreduceCall& a) { return small(a.bytes()); },
     [](Collective& c, const AllreduceCall& a) { return allreduceDirect(c, a.buffer, a.count, a.type, a.reduction); }},
    {"ring", false, always, always,
     [](Collective& c, const AllreduceCall& a) { return allreduceRing(c, a.buffer, a.count, a.type, a.reduction); }},
}};

// ---- all_to_all (equal blocks) -------------------------------------------
struct AlltoallCall {
  std::span<const Block> sends;
  std::span<const Block> receives;
};
// The staged rounds keep every rank copying in step; where ranks outnumber
// cores they wait on each other's turns on a core, and the pairwise
// exchange was 1.3-2.3x faster at 4 ranks on 2 cores (4-64 MiB). The
// composition only where asked for: on the rig (2 hosts of 2 ranks, a core
// each) its two phases one after the other took 82-370 us at 16 B where
// the flat exchange took 96-101 us, 118-462 against 98-112 us at 64 KiB.
// With few ranks per host it saves few messages; it is for many.
const std::array<Algorithm<AlltoallCall>, 3> kAlltoall{{
    {"hierarchical", true, acrossHosts, never,
     [](Collective& c, const AlltoallCall& a) { return alltoallHierarchical(c, a.sends, a.receives); }},
    {"staged", false, always,
     [](const Collective& c, const AlltoallCall& a) {
       return worthStaging(a.sends[static_cast<std::size_t>(c.rank())].bytes) && !c.group()->ranksOutnumberCores();
     },
     [](Collective& c, const AlltoallCall& a) { return alltoallStaged(c, a.sends, a.receives); }},
    {"pairwise", false, always, always,
     [](Collective& c, const AlltoallCall& a) {
       return alltoallPairwise(c, tag::Routine::AlltoallPairwise, a.sends, a.receives, false);
     }},
}};

// ---- reduce_scatter ------------------------------------------------------
struct ReduceScatterCall {
  std::span<const void* const> inputs;
  void* output;
  std::size_t count;
  DataType type;
  Reduction reduction;
};
// The composition only where asked for: on two simulated hosts of 2 ranks
// with a core each it lost to the flat ring (1 MiB blocks 1.8-2.1 against
// 1.2-1.35 ms, 64 MiB 106-140 against 85-93 ms): its packing copy costs
// more than the bytes it keeps off the link. Two ranks take the pairwise
// exchange, which stages them as a pair; more take the ring from the
// staging size.
const std::array<Algorithm<ReduceScatterCall>, 3> kReduceScatter{{
    {"hierarchical", true, acrossHosts, never,
     [](Collective& c, const ReduceScatterCall& a) {
       return reduceScatterHierarchical(c, a.inputs, a.output, a.count, a.type, a.reduction);
     }},
    {"ring", false, always,
     [](const Collective& c, const ReduceScatterCall& a) {
       return c.size() > 2 && worthStaging(a.count * elementSize(a.type));
     },
     [](Collective& c, const ReduceScatterCall& a) {
       return reduceScatterRing(c, a.inputs, a.output, a.count, a.type, a.reduction);
     }},
    {"pairwise", false, always, always,
     [](Collective& c, const ReduceScatterCall& a) {
       return reduceScatterPairwise(c, a.inputs, a.output, a.count, a.type, a.reduction);
     }},
}};

// ---- reduce --------------------------------------------------------------
struct ReduceCall {
  const void* input;
  void* output;
  std::size_t count;
  DataType type;
  Reduction reduction;
  int root;
};
// The composition only where asked for: on the rig it was 8 B 216 against
// 96 us, and within noise of the flat reduce from 64 KiB (64 MiB 145
// against 132 ms, 16 MiB 28 against 35 ms), where the host's one core
// reduces for both of its ranks either way.
const std::array<Algorithm<ReduceCall>, 2> kReduce{{
    {"hierarchical", true, acrossHosts, never,
     [](Collective& c, const ReduceCall& a) {
       return reduceHierarchical(c, a.input, a.output, a.count, a.type, a.reduction, a.root);
     }},
    {"direct", false, always, always,
     [](Collective& c, const ReduceCall& a) {
       return reduceDirect(c, a.input, a.output, a.count, a.type, a.reduction, a.root);
     }},
}};

template <class Call, std::size_t N>
std::vector<std::string> namesOf(const std::array<Algorithm<Call>, N>& table) {
  std::vector<std::string> names{"auto"};
  for (const Algorithm<Call>& row : table) {
    names.emplace_back(row.name);
  }
  return names;
}

}  // namespace

Task selectAllgather(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  return choose(kAllgather, config().allgatherAlgorithm, Rows::All, c, AllgatherCall{input, outputs, bytes});
}
Task selectFlatAllgather(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes) {
  return choose(kAllgather, config().allgatherAlgorithm, Rows::FlatOnly, c, AllgatherCall{input, outputs, bytes});
}

Task selectBroadcast(Collective& c, void* buffer, std::size_t bytes, int root) {
  return choose(kBroadcast, config().broadcastAlgorithm, Rows::All, c, BroadcastCall{buffer, bytes, root});
}
Task selectFlatBroadcast(Collective& c, void* buffer, std::size_t bytes, int root) {
  return choose(kBroadcast, config().broadcastAlgorithm, Rows::FlatOnly, c, BroadcastCall{buffer, bytes, root});
}

Task selectAllreduce(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  return choose(kAllreduce, config().allreduceAlgorithm, Rows::All, c, AllreduceCall{buffer, count, type, reduction});
}
Task selectFlatAllreduce(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  return choose(kAllreduce, config().allreduceAlgorithm, Rows::FlatOnly, c,
                AllreduceCall{buffer, count, type, reduction});
}

Task selectAlltoall(Collective& c, std::span<const Block> sends, std::span<const Block> receives) {
  return choose(kAlltoall, config().alltoallAlgorithm, Rows::All, c, AlltoallCall{sends, receives});
}

Task selectReduceScatter(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                         DataType type, Reduction reduction) {
  return choose(kReduceScatter, config().reduceScatterAlgorithm, Rows::All, c,
                ReduceScatterCall{inputs, output, count, type, reduction});
}
Task selectFlatReduceScatter(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                             DataType type, Reduction reduction) {
  return choose(kReduceScatter, config().reduceScatterAlgorithm, Rows::FlatOnly, c,
                ReduceScatterCall{inputs, output, count, type, reduction});
}

Task selectReduce(Collective& c, const void* input, void* output, std::size_t count, DataType type, Reduction reduction,
                  int root) {
  return choose(kReduce, config().reduceAlgorithm, Rows::All, c,
                ReduceCall{input, output, count, type, reduction, root});
}

Task selectBarrier(Collective& c) {
  return barrierDissemination(c);
}

std::vector<std::string> selectableAlgorithms(const std::string& setting) {
  if (setting == "UCXCOLL_ALLGATHER_ALGO") {
    return namesOf(kAllgather);
  }
  if (setting == "UCXCOLL_BCAST_ALGO") {
    return namesOf(kBroadcast);
  }
  if (setting == "UCXCOLL_ALLREDUCE_ALGO") {
    return namesOf(kAllreduce);
  }
  if (setting == "UCXCOLL_ALLTOALL_ALGO") {
    return namesOf(kAlltoall);
  }
  if (setting == "UCXCOLL_REDUCE_SCATTER_ALGO") {
    return namesOf(kReduceScatter);
  }
  if (setting == "UCXCOLL_REDUCE_ALGO") {
    return namesOf(kReduce);
  }
  throw std::invalid_argument("selectableAlgorithms: no table for " + setting);
}

}  // namespace ucxcoll
