#pragma once
// Every UCXCOLL_* environment variable is read here and nowhere else. The
// README's configuration table lists the same names, defaults and ranges.
// They are read once; a value out of its range (or not a number, or not
// one of the names a variable takes) is an error that group setup raises
// (validateConfig), never a silent fallback.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/logging.hpp"

namespace ucxcoll {

struct Config {
  // UCXCOLL_LOG_LEVEL: error|warn|info|debug.
  LogLevel logLevel = LogLevel::Warn;
  // UCXCOLL_SPIN_US: unset, a thread that waits for its own operation
  // polls for as long as recent waits lasted (engine/spin_budget.hpp), at
  // least 250 us and at most 2 ms, and the progress thread polls 250 us
  // (0 when this host runs more ranks than this process has cores: it would
  // take the core a peer needs; waiting callers then yield between polls).
  // Set, both poll exactly that long. spinMicrosecondsSet says whether the
  // user chose. Why 250 at least: on a VM a rank that went to sleep can be
  // woken hundreds of microseconds late; with 50 us a 256 KiB scatter or
  // all-to-all (a rendezvous: the peer answers after its copy) slept and
  // ran 5-8x slower in a third of the benchmark runs, with 250 in none.
  int spinMicroseconds = 250;
  bool spinMicrosecondsSet = false;
  // UCXCOLL_SMALL_MSG_BYTES: at or below this many bytes per rank the
  // latency-bound algorithms are used, above it the bandwidth-bound ones.
  std::size_t smallMessageBytes = 32 * 1024;
  // UCXCOLL_STAGING_MIN_BYTES: from this many bytes per rank the large
  // collectives stage their chunks through shared memory between ranks on
  // one host (collectives/staging.hpp). Below it the extra round that
  // agrees on staging costs more than staging saves. Measured at 2 ranks
  // on 4 KiB pages (benchmarks/bench_small.py): staging from 64 KiB made
  // the 256 KiB rows 10-50% slower; staging only from 8 MiB made the
  // 0.5-4 MiB rows 1.2-1.7x slower (all_reduce 1 MiB 220 against 136 us,
  // 4 MiB 922 against 556).
  std::size_t stagingMinBytes = std::size_t{256} << 10;
  // UCXCOLL_ALLGATHER_ALGO / UCXCOLL_ALLREDUCE_ALGO / UCXCOLL_BCAST_ALGO /
  // UCXCOLL_ALLTOALL_ALGO / UCXCOLL_REDUCE_SCATTER_ALGO /
  // UCXCOLL_REDUCE_ALGO: "auto" or force
  // one algorithm by name (for benchmarks and tests).
  std::string allgatherAlgorithm = "auto";
  std::string allreduceAlgorithm = "auto";
  std::string broadcastAlgorithm = "auto";
  std::string alltoallAlgorithm = "auto";
  std::string reduceScatterAlgorithm = "auto";
  std::string reduceAlgorithm = "auto";
  // UCXCOLL_EXIT_GRACE_MS: at interpreter exit, how long collectives still
  // queued or running may take to finish before they are aborted. Peers
  // usually exit after the same collectives, so they complete at once; a
  // dead peer costs at most this long.
  int exitGraceMilliseconds = 2000;
  // UCXCOLL_SHARED_MEMORY: 1 gives the process an inbox for the
  // shared-memory lanes (transport/shared_memory_transport.hpp) and lets
  // large all-reduces (and 2-rank reduces) between ranks on one host stage
  // their chunks in shared memory (collectives/staging.hpp); 0 leaves both
  // to plain UCX messages.
  bool sharedMemory = true;
  // UCXCOLL_PEERS_ON_OTHER_HOSTS: 1 treats every peer as if it ran on
  // another host (no process watch; UCX's own failure reports over
  // network-capable lanes), to test the cross-host failure paths on one
  // machine.
  bool peersOnOtherHosts = false;
  // UCXCOLL_PEER_LIVENESS_MS: how long an operation waits before it asks
  // the group's ranks on other hosts whether they are there, and how long
  // they have to answer; those that do not are unreachable (a host that is
  // down, a cut link) and the group fails naming them.
  long peerLivenessMilliseconds = 2000;
  // UCXCOLL_CONNECT: when a group connects to its ranks. "eager" connects
  // to every rank at setup, so that a rank it cannot reach fails
  // init_process_group; "lazy" connects to a rank when the first message
  // goes to or comes from it, so that a rank holds connections only to the
  // ranks it talks to (a ring's two neighbours, a tree's parent and
  // children), and a rank it cannot reach fails that first operation;
  // "auto" is eager up to kEagerConnectMaxRanks ranks, where a full mesh
  // costs little and errors at init help most, and lazy above.
  std::string connect = "auto";
  // UCXCOLL_NET_DEVICES: which network interfaces UCX may use, as an
  // NCCL-style list (common/interface_list.hpp); "" chooses automatically
  // (transport/network_devices.hpp). It wins over UCX_NET_DEVICES.
  std::string networkDevices;

  // "UCXCOLL_X=value: expected ..." for each variable set to a value it
  // does not take (that setting keeps its default here).
  std::vector<std::string> problems;
};

inline constexpr int kEagerConnectMaxRanks = 64;
inline constexpr long kMaxSpinMicroseconds = 1'000'000;
inline constexpr long kMaxSmallMessageBytes = 1L << 30;
inline constexpr long kMaxExitGraceMilliseconds = 3'600'000;
inline constexpr long kMinPeerLivenessMilliseconds = 100;
inline constexpr long kMaxPeerLivenessMilliseconds = 3'600'000;

// The value of an environment variable, or null.
using EnvironmentLookup = std::function<const char*(const char*)>;
Config parseConfig(const EnvironmentLookup& lookup);

// The settings that choose algorithms, which every rank of a group must
// share (ranks that choose differently would wait for messages that never
// come), as "NAME=value" items separated by spaces. Group setup compares
// every rank's.
std::string groupWideSettings(const Config& c);
// "NAME=theirs where this rank has mine" for each item that differs
// between two groupWideSettings strings (either side may lack items: an
// absent one reads as "unset").
std::vector<std::string> settingDifferences(const std::string& mine, const std::string& theirs);

// The process's environment, parsed once, on first use.
const Config& config();
// Throws std::invalid_argument naming every variable with a bad value.
void validateConfig();

}  // namespace ucxcoll
