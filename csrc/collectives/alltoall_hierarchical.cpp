// Hierarchical all-to-all for equal blocks, for a group across hosts with
// the same number of ranks on each. With L ranks on each of H hosts:
//   1. inside each host, rank i sends local rank j, in one message, its H
//      blocks for the ranks at place j on every host;
//   2. across hosts, each rank sends each counterpart, in one message, the
//      L blocks its host's ranks have for that counterpart.
// A rank sends H-1 messages across, each L blocks long, where the flat
// exchange sends L(H-1) single blocks across: for small blocks, where each
// message costs a link's latency, L times fewer of them. The blocks are
// copied three times (packed for phase 1, regrouped for phase 2, put in
// place after it), which only small blocks can afford.

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "collectives/collective.hpp"

namespace ucxcoll {

Task alltoallHierarchical(Collective& c, std::span<const Block> sends, std::span<const Block> receives) {
  c.begin(tag::Routine::AlltoallHierarchical);
  const HostTopology& topology = c.group()->topology();
  if (!topology.hierarchical()) {
    throw std::logic_error("alltoallHierarchical on a group that is not across hosts with equal ranks on each");
  }
  const auto hosts = static_cast<std::size_t>(topology.hosts());
  const std::size_t places = topology.localRanks().size();
  const std::size_t bytes = sends[static_cast<std::size_t>(c.rank())].bytes;
  auto rankAt = [&](std::size_t host, std::size_t place) {
    return static_cast<std::size_t>(topology.ranksOn(static_cast<int>(host))[place]);
  };

  // Four areas of H x L blocks: phase 1's packed sends [place][host] and
  // receives [source place][host], phase 2's sends [host][source place]
  // and receives [source host][source place].
  const std::size_t area = hosts * places * bytes;
  std::byte* packed = c.compositionScratch(std::max<std::size_t>(1, 4 * area));
  std::byte* landed = packed + area;
  std::byte* regrouped = landed + area;
  std::byte* arrived = regrouped + area;
  auto blockIn = [&](std::byte* base, std::size_t outer, std::size_t inner, std::size_t inners) {
    return base + (outer * inners + inner) * bytes;
  };

  for (std::size_t place = 0; place < places; ++place) {
    for (std::size_t host = 0; host < hosts; ++host) {
      copyBytes(blockIn(packed, place, host, hosts), sends[rankAt(host, place)].data, bytes);
    }
  }
  std::vector<Block> out;
  std::vector<Block> in;
  for (std::size_t place = 0; place < places; ++place) {
    out.push_back(Block{blockIn(packed, place, 0, hosts), hosts * bytes});
    in.push_back(Block{blockIn(landed, place, 0, hosts), hosts * bytes});
  }
  {
    Collective::View inside(c, topology.localRanks());
    co_await alltoallPairwise(c, tag::Routine::AlltoallPairwise, out, in, false);
  }

  out.clear();
  in.clear();
  for (std::size_t host = 0; host < hosts; ++host) {
    for (std::size_t place = 0; place < places; ++place) {
      copyBytes(blockIn(regrouped, host, place, places), blockIn(landed, place, host, hosts), bytes);
    }
    out.push_back(Block{blockIn(regrouped, host, 0, places), places * bytes});
    in.push_back(Block{blockIn(arrived, host, 0, places), places * bytes});
  }
  {
    Collective::View across(c, topology.counterparts());
    co_await alltoallPairwise(c, tag::Routine::AlltoallPairwise, out, in, false);
  }

  for (std::size_t host = 0; host < hosts; ++host) {
    for (std::size_t place = 0; place < places; ++place) {
      copyBytes(receives[rankAt(host, place)].data, blockIn(arrived, host, place, places), bytes);
    }
  }
}

}  // namespace ucxcoll
