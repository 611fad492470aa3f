// Reduce to one root. Small messages: every other rank sends its whole
// buffer to the root, which reduces them in rank order (one round). Large
// ones: a pairwise reduce-scatter (reduce_scatter_pairwise.cpp) leaves
// block p reduced on rank p, then every rank sends its block to the root,
// straight into place: each rank reduces only 1/n of the data, in
// parallel, and the root receives the same volume as in the direct form.
// Two ranks on one host whose links can both be staged through shared
// memory (from UCXCOLL_STAGING_MIN_BYTES) take reduce_staged_pair.cpp instead, once
// the ranks agreed on that (the agreement travels on the same slots, ahead
// of the pairwise messages, so either way the streams stay in step).
//
// Non-roots receive nothing in the direct form, so their sends are
// synchronous: a rank whose peers run another collective, or believe
// another rank is the root, waits and sees their messages instead of
// returning as if all went well.

#include <vector>

#include "collectives/collective.hpp"
#include "collectives/staged_link.hpp"
#include "collectives/staging.hpp"
#include "common/config.hpp"

namespace ucxcoll {
namespace {

constexpr uint32_t kToRootSlot = 0;
constexpr uint32_t kBlocksSlot = 1;

Task reduceToRootDirect(Collective& c, const void* input, void* output, std::size_t count, DataType type,
                        Reduction reduction, int root) {
  const int n = c.size();
  const int me = c.rank();
  const std::size_t bytes = count * elementSize(type);
  if (me != root) {
    co_await c.sendSync(root, kToRootSlot, input, bytes);
    co_return;
  }
  std::byte* landing = c.scratch(bytes * static_cast<std::size_t>(n));
  auto landingOf = [&](int r) { return landing + bytes * static_cast<std::size_t>(r); };
  std::vector<Request*> arriving(static_cast<std::size_t>(n), nullptr);
  for (int r = 0; r < n; ++r) {
    if (r != me) {
      arriving[r] = &c.recv(r, kToRootSlot, landingOf(r), bytes);
    }
  }
  // Rank order, whatever the arrival order. The root's own input may be its
  // output (in place), so it is copied aside unless it comes first.
  if (me != 0) {
    copyBytes(landingOf(me), input, bytes);
    co_await *arriving[0];
    copyBytes(output, landingOf(0), bytes);
  } else {
    copyBytes(output, input, bytes);
  }
  for (int r = 1; r < n; ++r) {
    if (arriving[r] != nullptr) {
      co_await *arriving[r];
    }
    reduceInto(reduction, type, output, landingOf(r), count);
  }
}

Task reduceScatterThenGather(Collective& c, const void* input, void* output, std::size_t count, DataType type,
                             Reduction reduction, int root) {
  const int n = c.size();
  const int me = c.rank();
  const std::size_t element = elementSize(type);
  std::vector<std::size_t> starts;
  std::vector<std::size_t> counts;
  std::vector<const void*> blocks;
  for (int p = 0; p < n; ++p) {
    auto block = static_cast<std::size_t>(p);
    auto parts = static_cast<std::size_t>(n);
    starts.push_back(block * (count / parts) + std::min(block, count % parts));
    counts.push_back(count / parts + (block < count % parts ? 1 : 0));
    blocks.push_back(static_cast<const std::byte*>(input) + starts.back() * element);
  }
  // Scratch: the exchange's n landing areas, then this rank's reduced
  // block (not the root's output: in place, that is its input too). Taken
  // at full size first, so the exchange's smaller request reuses it.
  const std::size_t blockBytes = counts[me] * element;
  std::byte* reduced =
      c.scratch(blockBytes * static_cast<std::size_t>(n + 1)) + blockBytes * static_cast<std::size_t>(n);
  co_await reduceBlocksPairwise(c, kToRootSlot, blocks, counts, reduced, type, reduction);
  if (me != root) {
    co_await c.sendSync(root, kBlocksSlot, reduced, blockBytes);
    co_return;
  }
  copyBytes(static_cast<std::byte*>(output) + starts[me] * element, reduced, blockBytes);
  for (int p = 0; p < n; ++p) {
    if (p != me) {
      c.recv(p, kBlocksSlot, static_cast<std::byte*>(output) + starts[p] * element, counts[p] * element);
    }
  }
  co_await c.all();
}

}  // namespace

Task reduceDirect(Collective& c, const void* input, void* output, std::size_t count, DataType type, Reduction reduction,
                  int root) {
  c.begin(tag::Routine::ReduceDirect,
          (static_cast<uint32_t>(root) << tag::kReductionBits) | static_cast<uint32_t>(reduction));
  if (c.size() == 1) {
    copyBytes(output, input, count * elementSize(type));
    co_return;
  }
  const std::size_t bytes = count * elementSize(type);
  if (bytes <= config().smallMessageBytes || count < static_cast<std::size_t>(c.size())) {
    co_await reduceToRootDirect(c, input, output, count, type, reduction, root);
    co_return;
  }
  if (c.size() == 2 && worthStaging(bytes)) {
    // With two ranks a rank's left and right links are the same pair, so
    // both ranks see the same two verdicts and choose alike.
    RingLinks links(c, kToRootSlot, kBlocksSlot);
    co_await links.connect(bytes);
    if (links.sendStaged() && links.receiveStaged()) {
      co_await reduceStagedPair(c, links, kToRootSlot, input, output, count, type, reduction, root);
      co_return;
    }
  }
  co_await reduceScatterThenGather(c, input, output, count, type, reduction, root);
}

}  // namespace ucxcoll
