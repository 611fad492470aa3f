// AVG and PREMUL_SUM around whichever all-reduce algorithm the size picks:
// the algorithm sums (it combines both as SUM, and the reduction travels in
// the tags, so a rank asking for AVG never matches one asking for SUM);
// PREMUL_SUM first multiplies this rank's input by its factor, AVG divides
// the sum by the group size afterwards. Every rank scales the same sum, so
// all ranks still end bit-identical.

#include "collectives/collective.hpp"

namespace ucxcoll {

Task allreduceScaled(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction,
                     double factor) {
  if (reduction == Reduction::PremulSum) {
    scaleInPlace(type, buffer, count, factor);
  }
  co_await selectAllreduce(c, buffer, count, type, reduction);
  if (reduction == Reduction::Average) {
    divideInPlace(type, buffer, count, c.size());
  }
}

}  // namespace ucxcoll
