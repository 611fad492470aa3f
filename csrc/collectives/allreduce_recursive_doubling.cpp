// All-reduce by recursive doubling, for small messages in large groups. The
// direct exchange finishes in one round but sends n - 1 messages per rank
// (n x n in all), which past a few dozen ranks costs more than the round
// trips it saves; this sends one message per rank per round, log2(n)
// rounds (two more where n is not a power of two).
//
// p is the largest power of two not above n. Ranks p .. n-1 (the extra
// ranks) first hand their buffer to rank r - p, which folds it into its
// own, and at the end get the result back from it. In round k the ranks
// below p pair up with the rank 2^k apart (r xor 2^k) and trade partial
// results; after it each pair holds the reduction of a block of 2^(k+1)
// ranks. Both members of a pair combine the same two partials, so both
// compute the same bits and every rank ends bit-identical; each puts the
// lower rank's partial first, since even a commutative sum is not
// bitwise symmetric where both operands are NaNs (x86 keeps the first
// one's payload).
//
// Slots: 0 the extra rank's buffer, 1 .. log2(p) the rounds, log2(p) + 1
// the result back to the extra rank.

#include "collectives/collective.hpp"

namespace ucxcoll {

Task allreduceRecursiveDoubling(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction) {
  c.begin(tag::Routine::AllreduceRecursiveDoubling, reduction);
  const int n = c.size();
  const int me = c.rank();
  const std::size_t bytes = count * elementSize(type);
  int p = 1;
  uint32_t rounds = 0;
  while (p * 2 <= n) {
    p *= 2;
    ++rounds;
  }
  const uint32_t resultSlot = rounds + 1;

  if (me >= p) {  // an extra rank: its partner reduces for it
    c.send(me - p, 0, buffer, bytes);
    c.recv(me - p, resultSlot, buffer, bytes);
    co_await c.all();
    co_return;
  }

  std::byte* incoming = c.scratch(bytes);
  const bool hasExtra = me + p < n;
  if (hasExtra) {
    c.recv(me + p, 0, incoming, bytes);
    co_await c.all();
    reduceInto(reduction, type, buffer, incoming, count);  // this rank is the lower
  }

  uint32_t slot = 1;
  for (int distance = 1; distance < p; distance *= 2, ++slot) {
    const int partner = me ^ distance;
    c.recv(partner, slot, incoming, bytes);
    c.send(partner, slot, buffer, bytes);
    co_await c.all();
    if (partner < me) {
      // The partner's partial first, as the partner combines them.
      reduceInto(reduction, type, incoming, buffer, count);
      copyBytes(buffer, incoming, bytes);
    } else {
      reduceInto(reduction, type, buffer, incoming, count);
    }
  }

  if (hasExtra) {
    c.send(me + p, resultSlot, buffer, bytes);
    co_await c.all();
  }
}

}  // namespace ucxcoll
