// Pairwise all-to-all: rank me sends sends[p] to rank p and receives
// receives[p] from it, every pair at once, each block straight from the
// caller's input into the caller's output (sends staggered: me+1 first).
// It also serves the all-gather whose ranks contribute different sizes
// (every sends[p] is then the same input).
//
// When the sizes are not implied by the tensors alone (explicit split
// sizes, per-peer tensors), two ranks can disagree about one block's size
// in a way only one of them would notice from the data. So a first round
// trades, per pair, "what I send you" and "what I expect from you"; both
// ends of a pair that disagree exchange no data with each other and raise,
// naming the peer and both sizes.

#include <array>
#include <string>
#include <vector>

#include "collectives/collective.hpp"
#include "common/error.hpp"

namespace ucxcoll {
namespace {

constexpr uint32_t kDataSlot = 0;
constexpr uint32_t kSizesSlot = 1;

}  // namespace

Task alltoallPairwise(Collective& c, tag::Routine routine, std::span<const Block> sends,
                      std::span<const Block> receives, bool checkSizes) {
  c.begin(routine);
  const int n = c.size();
  const int me = c.rank();
  // Peers this rank disagrees with: no data is exchanged with them.
  std::vector<bool> disagrees(static_cast<std::size_t>(n), false);
  std::string disagreements;
  if (checkSizes && n > 1) {
    // ours[p] = {bytes I send p, bytes I expect from p}; theirs[p] likewise from p.
    std::vector<std::array<uint64_t, 2>> ours(static_cast<std::size_t>(n));
    std::vector<std::array<uint64_t, 2>> theirs(static_cast<std::size_t>(n));
    for (int offset = 1; offset < n; ++offset) {
      const int from = (me - offset + n) % n;
      const int to = (me + offset) % n;
      ours[to] = {sends[to].bytes, receives[to].bytes};
      c.recv(from, kSizesSlot, theirs[from].data(), sizeof(theirs[from]));
      c.send(to, kSizesSlot, ours[to].data(), sizeof(ours[to]));
    }
    co_await c.all();
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        continue;
      }
      if (theirs[p][0] != receives[p].bytes) {
        disagreements += "; rank " + std::to_string(c.groupRank(p)) + " sends " + std::to_string(theirs[p][0]) +
                         " bytes to this rank, which expects " + std::to_string(receives[p].bytes);
        disagrees[p] = true;
      }
      if (theirs[p][1] != sends[p].bytes) {
        disagreements += "; this rank sends " + std::to_string(sends[p].bytes) + " bytes to rank " +
                         std::to_string(c.groupRank(p)) + ", which expects " + std::to_string(theirs[p][1]);
        disagrees[p] = true;
      }
    }
  }
  // Blocks move only between ranks that agree on both directions (the two
  // ends of a pair reach the same verdict), so a rank that agrees with
  // everyone completes with correct data and is not held up by a pair that
  // does not; the ranks of that pair fail below.
  for (int offset = 1; offset < n; ++offset) {
    const int from = (me - offset + n) % n;
    const int to = (me + offset) % n;
    if (!disagrees[from]) {
      c.recv(from, kDataSlot, receives[from].data, receives[from].bytes);
    }
    if (!disagrees[to]) {
      c.send(to, kDataSlot, sends[to].data, sends[to].bytes);
    }
  }
  copyBytes(receives[me].data, sends[me].data, receives[me].bytes);
  co_await c.all();
  if (!disagreements.empty()) {
    throw MismatchError(c.name() + ": ranks disagree about the split sizes" + disagreements +
                        " (every rank's output split for a peer must equal that peer's input split for it)");
  }
}

}  // namespace ucxcoll
