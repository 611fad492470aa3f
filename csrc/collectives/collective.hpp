#pragma once
// One run of one collective on one group, as an algorithm sees it: who we
// are, sends and receives by (peer, slot), waits, scratch memory. The
// algorithm first says which routine it is (begin), which fixes the tags of
// all its messages (tag.hpp): a message of another collective, another
// algorithm or another root can never be received by this one. Each
// algorithm is one coroutine in its own file and reads top to bottom.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/datatype.hpp"
#include "engine/group.hpp"
#include "engine/operation.hpp"
#include "engine/task.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {

// Scratch memory for algorithms, kept by a group between collectives so
// that large ones do not allocate (and page-fault) a fresh buffer each time.
// Its contents are unspecified whenever it is handed out.
class Workspace {
 public:
  std::byte* get(std::size_t bytes) { return scratch_.get(bytes); }
  // A second area, apart from get()'s: a composition keeps its own data
  // here while the algorithms it runs use get().
  std::byte* forComposition(std::size_t bytes) { return composition_.get(bytes); }

 private:
  class Area {
   public:
    std::byte* get(std::size_t bytes);

   private:
    std::unique_ptr<std::byte[]> buffer_;
    std::size_t capacity_ = 0;
  };
  Area scratch_;
  Area composition_;
};

class Collective : public Operation {
 public:
  using Body = std::function<Task(Collective&)>;

  // `what` (static storage, e.g. "all_gather") and the sequence number name
  // it in errors: `all_gather #12 on group "0" (rank 1 of 2, timeout 30000 ms)`.
  Collective(std::shared_ptr<Group> group, uint64_t sequence, const char* what, std::chrono::milliseconds timeout,
             Body body, std::shared_ptr<Workspace> workspace = nullptr);

  // Within a rank view (below), the view's rank and size.
  int rank() const { return rank_; }
  int size() const { return size_; }
  uint64_t sequence() const { return sequence_; }

  // ---- Rank views: how a hierarchical algorithm composes others ---------
  // While a View lives, the collective runs on `members` (group ranks, in
  // view-rank order, this rank among them) as if they were its whole group:
  // rank(), size(), send() and recv() speak view ranks, and the algorithm
  // run there calls begin() for itself. Its messages are a phase of the
  // composed routine (tag.hpp): tags of their own, so an existing algorithm
  // runs unchanged on a view. Every rank of the group enters the same views
  // in the same order (also one in which it is alone), as the phase number
  // counts them; at most 2^kPhaseIndexBits per collective.
  //
  // A rooted composition (broadcast, reduce) enters its views with
  // Tags::GroupDetail: their messages then carry the composed collective's
  // root (and reduction) in place of the root the view's algorithm sees, so
  // ranks that disagree about the root tell from any phase's messages, also
  // a rank that has no part in the phase where the others wait.
  class View {
   public:
    enum class Tags { ViewDetail, GroupDetail };
    View(Collective& c, std::vector<int> members, Tags tags = Tags::ViewDetail);
    ~View();
    View(const View&) = delete;
    View& operator=(const View&) = delete;

   private:
    Collective& c_;
  };
  // The group rank of view rank `peer` (outside a view: itself).
  int groupRank(int peer) const { return inView_ ? members_[static_cast<std::size_t>(peer)] : peer; }

  // Which collective and algorithm this is, and its detail: the root for a
  // rooted routine, the reduction for a reducing one (tag.hpp). Called
  // once, before the first message.
  void begin(tag::Routine routine, uint32_t detail = 0);
  void begin(tag::Routine routine, Reduction reduction) { begin(routine, static_cast<uint32_t>(reduction)); }

  // `slot` tells apart what one receiver gets from one sender within this
  // collective (see tag.hpp): for rooted routines a round number below 32,
  // for reducing ones a value below 2 * size(), for reduce 0 or 1. The
  // tag carries the sender, so a receive from `peer` matches only its
  // messages.
  Request& send(int peer, uint32_t slot, const void* data, std::size_t bytes);
  // Completes only once the receiver has matched it: for a rank that
  // receives nothing in a collective (a broadcast's root), so that it too
  // notices a peer that runs a different collective.
  Request& sendSync(int peer, uint32_t slot, const void* data, std::size_t bytes);
  Request& recv(int peer, uint32_t slot, void* data, std::size_t bytes);

  // At least `bytes` of scratch memory, valid until the collective ends.
  std::byte* scratch(std::size_t bytes) { return workspace_->get(bytes); }
  // Scratch apart from scratch(), for a composition's own data.
  std::byte* compositionScratch(std::size_t bytes) { return workspace_->forComposition(bytes); }

 protected:
  Task run() override { return body_(*this); }
  std::string describe() const override { return what_ + (" #" + std::to_string(sequence_)); }
  std::string describeProgress() const override;
  const char* algorithm() const override { return begun_ ? tag::algorithmName(routine_) : nullptr; }
  std::exception_ptr checkForDisagreement(Transport& transport) override;
  std::string mismatchHint() const override;
  void announceFailure(const std::exception_ptr& error) override;

 private:
  // `sender` is a group rank.
  uint64_t tagFor(uint32_t channel, uint32_t slot, int sender) const;
  std::string describe(tag::Routine routine, uint32_t detail) const;
  // What a message's tag says it belongs to (a phase: of which composition).
  std::string describeTag(uint64_t tag) const;
  // Messages under `sequence` (a sequence field) that a rank running
  // `routine` (a phase's routine inside a view) with `detail` never
  // matches.
  std::exception_ptr checkEvidence(Transport& transport, tag::Routine routine, uint32_t detail, uint64_t sequence,
                                   const std::string& mine);
  std::exception_ptr evidenceOfDisagreement(const std::string& mine, uint64_t theirs) const;
  // What describe(routine, detail) says after the collective's name, e.g.
  // " from rank 1 (binomial algorithm)".
  static std::string describeDetail(tag::Routine routine, uint32_t detail);
  // Messages of peers that run something else under this sequence number.
  std::exception_ptr checkOwnEvidence(Transport& transport);
  // A failure notice (announceFailure) from a peer this collective waits for.
  std::exception_ptr checkForFailureNotice(Transport& transport);

  int rank_;
  int size_;
  int groupRank_;
  int groupSize_;
  uint64_t sequence_;
  const char* what_;
  Body body_;
  std::shared_ptr<Workspace> workspace_;
  tag::Routine routine_{};
  bool begun_ = false;
  // The rank whose leaving failed this collective (checkForFailureNotice).
  std::optional<LeftPeer> leaver_;
  uint32_t detail_ = 0;
  // The rank view the algorithm runs on, if any, and its phase.
  bool inView_ = false;
  std::vector<int> members_;
  uint32_t phases_ = 0;  // views entered so far; the current one is phases_ - 1
  tag::Routine viewRoutine_{};
  uint32_t viewDetail_ = 0;
  bool viewBegun_ = false;
  bool viewCarriesGroupDetail_ = false;
  // The detail the current phase's tags carry.
  uint32_t phaseTagDetail() const { return viewCarriesGroupDetail_ ? detail_ : viewDetail_; }
  // A message of a phase of another composition than this one.
  std::exception_ptr checkOtherCompositions(Transport& transport, const std::string& mine);
  // A message of another phase of this composition with another detail.
  std::exception_ptr checkOtherPhasesDetail(Transport& transport, const std::string& mine);
};

// Copy that tolerates the same or overlapping buffers (in-place collectives
// pass an input that is a view of the output).
void copyBytes(void* destination, const void* source, std::size_t bytes);

// ---- Algorithms: one per file ------------------------------------------

// All-gather: every rank contributes `bytes` from `input`; afterwards
// outputs[r] holds rank r's contribution on every rank.
Task allgatherDirect(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);
Task allgatherRing(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);
// The ring in chunks staged through shared memory where a link can be, for
// large messages.
Task allgatherChunkedRing(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);
// The direct exchange where each rank contributes inputs.size() blocks of
// `bytes`: rank r's block j lands in outputs[r * inputs.size() + j].
Task allgatherDirectBlocks(Collective& c, std::span<const void* const> inputs, std::span<void* const> outputs,
                           std::size_t bytes);
// Across hosts (the group's topology must be hierarchical()): an all-gather
// among counterparts, then inside each host a direct exchange of the blocks
// each rank then holds.
Task allgatherHierarchical(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);

// Broadcast `bytes` at `buffer` from group rank `root` to all ranks.
Task broadcastBinomial(Collective& c, void* buffer, std::size_t bytes, int root);
// The same as a chain from the root, in chunks passed on as they arrive
// (staged through shared memory where a link can be): for large messages.
Task broadcastPipelined(Collective& c, void* buffer, std::size_t bytes, int root);
// Across hosts (hierarchical() topology): from the root to its counterparts,
// then inside each host.
Task broadcastHierarchical(Collective& c, void* buffer, std::size_t bytes, int root);

// All-reduce `count` elements in place.
Task allreduceDirect(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction);
Task allreduceRing(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction);
Task allreduceRecursiveDoubling(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction);
// Across hosts (the group's topology must be hierarchical()): inside each
// host a reduce-scatter, across hosts each rank all-reduces its part with
// its counterparts (every local rank at once), inside each host an
// all-gather; each phase takes the algorithm its size picks.
Task allreduceHierarchical(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction);

// All-reduce with the reductions that scale (AVG, PREMUL_SUM by `factor`)
// as well as the others, over the algorithm selectAllreduce picks.
Task allreduceScaled(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction, double factor);

// Returns once every rank has entered.
Task barrierDissemination(Collective& c);
// The same, through rank 0, whose timeout error names every absent rank.
Task barrierMonitored(Collective& c);

// Reduce `count` elements of `input` into `output` on rank `root` (output
// may be input there; other ranks' output is not touched).
Task reduceDirect(Collective& c, const void* input, void* output, std::size_t count, DataType type, Reduction reduction,
                  int root);

// Across hosts (hierarchical() topology): inside each host to the rank at
// the root's place, then among those to the root.
Task reduceHierarchical(Collective& c, const void* input, void* output, std::size_t count, DataType type,
                        Reduction reduction, int root);

// The large reduce of two ranks whose links (both to the peer) are staged
// through shared memory; called by reduceDirect once `links` is connected.
class RingLinks;
Task reduceStagedPair(Collective& c, RingLinks& links, uint32_t slot, const void* input, void* output,
                      std::size_t count, DataType type, Reduction reduction, int root);

// Reduce-scatter: rank p's output (`count` elements) is the reduction of
// every rank's inputs[p]. `output` must not overlap any input.
Task reduceScatterPairwise(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                           DataType type, Reduction reduction);
// The same around a ring, in chunks, each reduced as it arrives (staged
// through shared memory where a link can be): for large blocks on more
// than two ranks.
Task reduceScatterRing(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                       DataType type, Reduction reduction);
// Across hosts (the group's topology must be hierarchical()): inside each
// host a reduce-scatter by counterpart, so that each rank holds, reduced
// over its host, the blocks of its counterparts on every host; across hosts
// a reduce-scatter of those among the counterparts.
Task reduceScatterHierarchical(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                               DataType type, Reduction reduction);
// The pairwise exchange for blocks of any sizes (rank p's output: counts[p]
// elements, the reduction of every rank's inputs[p]).
Task reduceScatterUneven(Collective& c, std::span<const void* const> inputs, std::span<const std::size_t> counts,
                         void* output, DataType type, Reduction reduction);
// Its exchange alone, for blocks of any size (blocks[p]: counts[p]
// elements), without begin(); messages use `slot`. Uses scratch from the
// start: a caller that keeps its own data there must ask for it first, at
// least (n x counts[rank]) elements large, and use what lies beyond.
Task reduceBlocksPairwise(Collective& c, uint32_t slot, std::span<const void* const> blocks,
                          std::span<const std::size_t> counts, void* output, DataType type, Reduction reduction);

// Gather `bytes` from every rank into outputs[rank] on `root` (outputs is
// only read on the root).
Task gatherDirect(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes, int root);
// Scatter inputs[p] (read on the root only) into rank p's `output`.
Task scatterDirect(Collective& c, std::span<const void* const> inputs, void* output, std::size_t bytes, int root);

// One block of an all-to-all: where it is and how many bytes.
struct Block {
  void* data;
  std::size_t bytes;
};
// All-to-all: sends[p] goes to rank p, receives[p] comes from rank p.
// `routine` names the collective (AlltoallPairwise, AllgatherUneven). With
// `checkSizes`, each pair first trades its sizes; the two ends of a pair
// that disagree exchange nothing with each other and throw MismatchError
// once the rest has moved.
Task alltoallPairwise(Collective& c, tag::Routine routine, std::span<const Block> sends,
                      std::span<const Block> receives, bool checkSizes);
// The same for equal blocks (every one sends[rank].bytes) in rounds, each
// block staged through shared memory where its link can be: for large ones.
Task alltoallStaged(Collective& c, std::span<const Block> sends, std::span<const Block> receives);
// Equal blocks across hosts (hierarchical() topology): inside each host the
// blocks go to the rank at their destination's place, then each crosses
// with the others from its host for the same rank, one message per pair of
// counterparts: for small blocks.
Task alltoallHierarchical(Collective& c, std::span<const Block> sends, std::span<const Block> receives);

// ---- Selection (select.cpp): the algorithm for this message, group size
// and topology, or the one UCXCOLL_*_ALGO forces. The selectFlat* forms
// choose among the algorithms that run on any ranks (not the compositions):
// for the phases of a composition. -------------------------------------
Task selectAllgather(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);
// Per rank: from this size on, `auto` gathers across hosts hierarchically
// (select.cpp says what was measured).
inline constexpr std::size_t kHierarchicalAllgatherMinBytes = 256 * 1024;
Task selectFlatAllgather(Collective& c, const void* input, std::span<void* const> outputs, std::size_t bytes);
Task selectBroadcast(Collective& c, void* buffer, std::size_t bytes, int root);
Task selectFlatBroadcast(Collective& c, void* buffer, std::size_t bytes, int root);
Task selectAllreduce(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction);
Task selectFlatAllreduce(Collective& c, void* buffer, std::size_t count, DataType type, Reduction reduction);
Task selectReduce(Collective& c, const void* input, void* output, std::size_t count, DataType type, Reduction reduction,
                  int root);
// Equal blocks of `sends[rank].bytes`; staged once a block is worth staging.
Task selectAlltoall(Collective& c, std::span<const Block> sends, std::span<const Block> receives);
Task selectReduceScatter(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                         DataType type, Reduction reduction);
Task selectFlatReduceScatter(Collective& c, std::span<const void* const> inputs, void* output, std::size_t count,
                             DataType type, Reduction reduction);
Task selectBarrier(Collective& c);
// "auto" and the algorithms of the table that UCXCOLL_*_ALGO variable
// `setting` chooses from, in table order (what config.cpp must accept).
std::vector<std::string> selectableAlgorithms(const std::string& setting);

}  // namespace ucxcoll
