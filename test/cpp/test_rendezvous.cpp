// Group setup through the store (setup/rendezvous.hpp), ranks as threads
// over an in-memory store: every rank learns the same table, with a number
// of store operations that does not grow with the group, also when a rank
// comes late or refuses.

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster.hpp"
#include "collectives/collective.hpp"
#include "common/config.hpp"
#include "engine/member_exchange.hpp"
#include "setup/rendezvous.hpp"
#include "setup/table_relay.hpp"

using namespace ucxcoll;
using namespace ucxcoll::testing;
using namespace std::chrono_literals;

namespace {

// The store every rank of a test shares: a map, gets that wait. Each key
// has its own condition, so that a set wakes only the ranks waiting for
// that key (as a TCPStore server answers only the waiters of a key): with
// one condition for all, a 1,024-rank simulation spent its time waking
// every waiting thread at every set.
class MemoryStore {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) {
    std::shared_ptr<std::condition_variable> waiters;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
      waiters = waitersOf(key);
    }
    waiters->notify_all();
  }
  std::vector<uint8_t> get(const std::string& key) {
    std::unique_lock<std::mutex> lock(mutex_);
    std::shared_ptr<std::condition_variable> waiters = waitersOf(key);
    if (!waiters->wait_for(lock, 300s, [&] { return values_.count(key) > 0; })) {
      throw std::runtime_error("store timeout waiting for " + key);
    }
    return values_[key];
  }
  std::vector<uint8_t> setIfAbsent(const std::string& key, const std::vector<uint8_t>& value) {
    std::shared_ptr<std::condition_variable> waiters;
    std::vector<uint8_t> held;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held = values_.emplace(key, value).first->second;
      waiters = waitersOf(key);
    }
    waiters->notify_all();
    return held;
  }
  bool check(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return values_.count(key) > 0;
  }
  int64_t add(const std::string& key, int64_t increment) {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t& counter = counters_[key];
    counter += increment;
    return counter;
  }

 private:
  std::shared_ptr<std::condition_variable> waitersOf(const std::string& key) {
    auto& waiters = waiters_[key];
    if (!waiters) {
      waiters = std::make_shared<std::condition_variable>();
    }
    return waiters;
  }
  std::mutex mutex_;
  std::map<std::string, std::vector<uint8_t>> values_;
  std::map<std::string, int64_t> counters_;
  std::map<std::string, std::shared_ptr<std::condition_variable>> waiters_;
};

// One rank's view of the shared store, counting what it asks; each
// operation takes `delay` first (a slow store server).
class CountingStore final : public KeyValueStore {
 public:
  explicit CountingStore(MemoryStore& shared, std::chrono::milliseconds delay = {}) : shared_(shared), delay_(delay) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    count();
    shared_.set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    count();
    std::vector<uint8_t> value = shared_.get(key);
    bytesRead += value.size();
    if (key.ends_with("/table")) {
      ++tableReads;
    }
    return value;
  }
  bool check(const std::string& key) override {
    count();
    return shared_.check(key);
  }
  int64_t add(const std::string& key, int64_t increment) override {
    count();
    return shared_.add(key, increment);
  }
  std::vector<uint8_t> setIfAbsent(const std::string& key, const std::vector<uint8_t>& value) override {
    count();
    return shared_.setIfAbsent(key, value);
  }
  std::unique_ptr<KeyValueStore> connectAnother() override { return std::make_unique<CountingStore>(shared_, delay_); }
  int operations = 0;
  std::size_t bytesRead = 0;
  int tableReads = 0;  // gets of the whole table

 private:
  void count() {
    ++operations;
    std::this_thread::sleep_for(delay_);
  }
  MemoryStore& shared_;
  std::chrono::milliseconds delay_;
};

std::vector<uint8_t> addressOf(int rank) {
  return {static_cast<uint8_t>(rank), static_cast<uint8_t>(rank >> 8), 0xA5};
}

// Runs a rank's setup; a refusal (invalid_argument) is published as the
// backend publishes one. Returns the error, empty if none.
std::string setUpOrRefuse(KeyValueStore& store, int rank, int size, const std::function<void()>& setUp) {
  try {
    setUp();
    return {};
  } catch (const std::invalid_argument& refusal) {
    publishSetupFailure(store, rank, size, refusal.what());
    return std::string("refused: ") + refusal.what();
  } catch (const std::exception& error) {
    return error.what();
  }
}

struct RankOutcome {
  GroupRendezvous table;
  std::string error;
  int storeOperations = 0;
};

// Every rank of a `size`-rank group runs the rendezvous on its own thread;
// `before(rank)` runs first on that thread and may refuse (throw) instead.
std::vector<RankOutcome> runGroup(MemoryStore& store, int size, const std::function<void(int)>& before = {},
                                  std::chrono::milliseconds storeDelay = {}) {
  std::vector<RankOutcome> outcomes(static_cast<std::size_t>(size));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      CountingStore mine(store, storeDelay);
      RankOutcome& outcome = outcomes[static_cast<std::size_t>(rank)];
      outcome.error = setUpOrRefuse(mine, rank, size, [&] {
        if (before) {
          before(rank);
        }
        outcome.table = rendezvous(mine, rank, size, addressOf(rank), 1000u + static_cast<uint32_t>(rank), "lo");
      });
      outcome.storeOperations = mine.operations;
    });
  }
  for (auto& thread : ranks) {
    thread.join();
  }
  return outcomes;
}

// A rank's setup step that makes rank `refuser` refuse (a setting out of
// range), and what every rank must then say.
std::function<void(int)> refusingAt(int refuser) {
  return [refuser](int rank) {
    if (rank == refuser) {
      throw std::invalid_argument("UCXCOLL_SOMETHING=7 is out of range");
    }
  };
}

template <typename Outcome>
void checkEveryRankNamesRefuser(const std::vector<Outcome>& outcomes, int refuser) {
  for (int rank = 0; rank < static_cast<int>(outcomes.size()); ++rank) {
    const std::string& error = outcomes[static_cast<std::size_t>(rank)].error;
    INFO("refuser " << refuser << ", rank " << rank);
    if (rank == refuser) {
      CHECK(error == "refused: UCXCOLL_SOMETHING=7 is out of range");
    } else {
      CHECK_THAT(error, Catch::Matchers::StartsWith("rank " + std::to_string(refuser) + " (on ") &&
                            Catch::Matchers::EndsWith(") cannot take part: UCXCOLL_SOMETHING=7 is out of range"));
    }
  }
}

}  // namespace

TEST_CASE("rendezvous: every rank learns every entry with a bounded number of store operations", "[setup]") {
  for (int size : {1, 2, 3, 5, 6, 21, 64, 100}) {
    MemoryStore store;
    const auto outcomes = runGroup(store, size);
    int most = 0;
    for (int rank = 0; rank < size; ++rank) {
      const RankOutcome& outcome = outcomes[static_cast<std::size_t>(rank)];
      INFO("size " << size << ", rank " << rank << ": " << outcome.error);
      REQUIRE(outcome.error.empty());
      REQUIRE(outcome.table.addresses.size() == static_cast<std::size_t>(size));
      for (int peer = 0; peer < size; ++peer) {
        CHECK(outcome.table.addresses[static_cast<std::size_t>(peer)] == addressOf(peer));
        CHECK(outcome.table.channels[static_cast<std::size_t>(peer)] == 1000u + static_cast<uint32_t>(peer));
      }
      // All threads of one process: one host, every rank watchable.
      CHECK(outcome.table.ranksOnThisHost == size);
      CHECK(outcome.table.processes.at(static_cast<std::size_t>(rank)).known());
      most = std::max(most, outcome.storeOperations);
    }
    INFO("size " << size);
    CHECK(most <= kRendezvousStoreOpsPerRank);
    // The root: the join counter, its identity, its children's parts and
    // the identities of those with children of their own, the table it
    // publishes. A leaf: the join counter, its parent's identity, its own
    // part, the table.
    const int children = std::min(size - 1, kRendezvousFanOut);
    int innerChildren = 0;
    for (int child = 1; child <= children; ++child) {
      innerChildren += child * kRendezvousFanOut + 1 < size ? 1 : 0;
    }
    CHECK(outcomes.front().storeOperations == (size > 1 ? 3 : 2) + children + innerChildren);
    if (size > 1) {
      CHECK(outcomes.back().storeOperations == 4);
    }
  }
}

TEST_CASE("rendezvous: a rank that comes late holds the others until it arrives, then all agree", "[setup]") {
  MemoryStore store;
  const int size = 9;
  const auto outcomes = runGroup(store, size, [](int rank) {
    if (rank == 2) {  // an inner rank of the tree: ranks 9.. would be its children
      std::this_thread::sleep_for(300ms);
    }
  });
  for (const RankOutcome& outcome : outcomes) {
    REQUIRE(outcome.error.empty());
    CHECK(outcome.table.addresses.size() == static_cast<std::size_t>(size));
    CHECK(outcome.storeOperations <= kRendezvousStoreOpsPerRank);
  }
}

TEST_CASE("rendezvous: a slow store (50 ms an operation) slows the setup but changes nothing else", "[setup]") {
  MemoryStore store;
  const int size = 21;  // three levels of the tree
  const auto outcomes = runGroup(store, size, {}, 50ms);
  for (int rank = 0; rank < size; ++rank) {
    const RankOutcome& outcome = outcomes[static_cast<std::size_t>(rank)];
    REQUIRE(outcome.error.empty());
    CHECK(outcome.table.addresses.at(static_cast<std::size_t>(size - 1 - rank)) == addressOf(size - 1 - rank));
    CHECK(outcome.storeOperations <= kRendezvousStoreOpsPerRank);
  }
}

TEST_CASE("rendezvous: a rank that refuses makes every other rank raise, naming it and why", "[setup]") {
  // Rank 1 has children (5..8) in the tree: they must hear of it too,
  // although its part of the table never holds theirs.
  for (int refuser : {0, 1, 7}) {
    MemoryStore store;
    const int size = 9;
    const auto outcomes = runGroup(store, size, refusingAt(refuser));
    checkEveryRankNamesRefuser(outcomes, refuser);
  }
}

TEST_CASE("rendezvous: a rank whose process dies while others wait for it is named by every rank at once", "[setup]") {
  // Six ranks as threads; rank 1 (whose child is rank 5) names a forked
  // process as its own, and waits for rank 5, which comes only later. The
  // forked process is killed: rank 0, which waits for rank 1's part and
  // watches that process, writes the death in its place, so ranks 0, 2, 3
  // and 4 raise naming rank 1 long before the store's timeout (300 s
  // here), and so does rank 5 when it comes.
  const pid_t standInPid = ::fork();
  REQUIRE(standInPid >= 0);
  if (standInPid == 0) {
    ::pause();
    ::_exit(0);
  }
  const ProcessIdentity standInProcess = processIdentity(standInPid);
  REQUIRE(standInProcess.known());
  MemoryStore store;
  const int size = 6;
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  auto runRank = [&](int rank) {
    CountingStore mine(store);
    try {
      (void)rendezvous(mine, rank, size, addressOf(rank), 1000u + static_cast<uint32_t>(rank), "lo",
                       rank == 1 ? standInProcess : thisProcess());
    } catch (const std::exception& error) {
      errors[static_cast<std::size_t>(rank)] = error.what();
    }
  };
  std::vector<std::thread> early;
  for (int rank = 0; rank < 5; ++rank) {
    early.emplace_back(runRank, rank);
  }
  std::this_thread::sleep_for(200ms);  // rank 1 waits for rank 5 by now
  ::kill(standInPid, SIGKILL);
  ::waitpid(standInPid, nullptr, 0);
  for (int rank : {0, 2, 3, 4}) {
    early[static_cast<std::size_t>(rank)].join();
  }
  std::thread late(runRank, 5);  // lets rank 1's thread finish too
  late.join();
  early[1].join();
  const std::string died =
      ") died: its process (pid " + std::to_string(standInPid) + ") exited while the group was being set up";
  for (int rank = 0; rank < size; ++rank) {
    INFO("rank " << rank);
    CHECK_THAT(errors[static_cast<std::size_t>(rank)],
               Catch::Matchers::StartsWith("rank 1 (on ") && Catch::Matchers::EndsWith(died));
  }
}

TEST_CASE("rendezvous: a second incarnation of a group on the same store gets its own table", "[setup]") {
  MemoryStore store;
  runGroup(store, 4);
  const auto again = runGroup(store, 4);
  for (const RankOutcome& outcome : again) {
    REQUIRE(outcome.error.empty());
    CHECK(outcome.table.channels == std::vector<uint32_t>{1000, 1001, 1002, 1003});
  }
}

// The relay (setup/table_relay.hpp): ranks as threads, each with its own
// engine over the loopback transport, as the backend sets a group up.
struct RelayedOutcome {
  GroupRendezvous table;
  std::string error;
  int storeOperations = 0;
  std::size_t bytesRead = 0;
  int tableReads = 0;
};

std::vector<RelayedOutcome> runRelayedGroup(MemoryStore& store, int size,
                                            const std::function<RelayOptions(int)>& optionsOf = {},
                                            const std::function<void(int)>& before = {},
                                            const std::function<ProcessIdentity(int)>& processOf = {},
                                            const std::function<void(int)>& after = {}) {
  LoopbackFabric fabric;
  std::vector<std::unique_ptr<Engine>> engines;
  for (int rank = 0; rank < size; ++rank) {
    engines.push_back(std::make_unique<Engine>(fabric.attach()));
  }
  std::vector<RelayedOutcome> outcomes(static_cast<std::size_t>(size));
  auto failures = runRanks(size, [&](int rank) {
    Engine& engine = *engines[static_cast<std::size_t>(rank)];
    RelayedOutcome& outcome = outcomes[static_cast<std::size_t>(rank)];
    CountingStore mine(store);
    const uint32_t channel = engine.openChannel();
    outcome.error = setUpOrRefuse(mine, rank, size, [&] {
      if (before) {
        before(rank);
      }
      outcome.table =
          relayedRendezvous(mine, engine, rank, size, channel, "lo", 60s, optionsOf ? optionsOf(rank) : RelayOptions{},
                            processOf ? processOf(rank) : thisProcess());
      if (after) {
        after(rank);
      }
    });
    outcome.storeOperations = mine.operations;
    outcome.bytesRead = mine.bytesRead;
    outcome.tableReads = mine.tableReads;
  });
  checkNoFailures(failures);
  // Every send of the table has ended (the receivers all had it) before
  // the engines go.
  for (auto& engine : engines) {
    CHECK(engine->waitUntilIdle(10s));
    engine->stop();
  }
  return outcomes;
}

// Entry of rank `rank` as its channel and address in a relayed table.
void checkRelayedTable(const RelayedOutcome& outcome, int size, const std::vector<uint32_t>& channels) {
  REQUIRE(outcome.error.empty());
  REQUIRE(outcome.table.addresses.size() == static_cast<std::size_t>(size));
  CHECK(outcome.table.channels == channels);
  CHECK(outcome.table.ranksOnThisHost == size);
}

TEST_CASE("relayed rendezvous: the table goes down the tree over the engine, and no rank but 0 reads it from the store",
          "[setup][relay]") {
  for (int size : {1, 2, 5, 21, 100}) {
    MemoryStore store;
    const auto outcomes = runRelayedGroup(store, size);
    std::vector<uint32_t> channels;
    for (const RelayedOutcome& outcome : outcomes) {
      channels.push_back(outcome.table.channels.empty() ? 0 : outcome.table.channels.front());
    }
    const RelayedOutcome& root = outcomes.front();
    REQUIRE(root.error.empty());
    for (int rank = 0; rank < size; ++rank) {
      const RelayedOutcome& outcome = outcomes[static_cast<std::size_t>(rank)];
      INFO("size " << size << ", rank " << rank << ": " << outcome.error);
      checkRelayedTable(outcome, size, root.table.channels);
      // Every rank has the same table: its own entry included.
      CHECK(outcome.table.addresses == root.table.addresses);
      CHECK(outcome.tableReads == 0);
      CHECK(outcome.storeOperations <= kRendezvousStoreOpsPerRank - 1);
      // A leaf reads its parent's identity, nobody's part: what it reads
      // from the store does not grow with the group.
      if (rank * kRendezvousFanOut + 1 >= size && rank > 0) {
        CHECK(outcome.storeOperations == 3);
        CHECK(outcome.bytesRead < 256);
      }
    }
  }
}

TEST_CASE("relayed rendezvous: where a parent does not forward the table, its children read it from the store",
          "[setup][relay]") {
  // Rank 1 (children 5..8) keeps the table to itself, as a parent on a
  // host that lost its link would: its children find the table in the
  // store at their first look (100 ms here), and everybody else gets it
  // relayed.
  MemoryStore store;
  const int size = 21;
  const auto outcomes = runRelayedGroup(store, size, [](int rank) {
    RelayOptions options;
    options.firstStoreLook = 100ms;
    options.forward = rank != 1;
    return options;
  });
  for (int rank = 0; rank < size; ++rank) {
    const RelayedOutcome& outcome = outcomes[static_cast<std::size_t>(rank)];
    INFO("rank " << rank << ": " << outcome.error);
    checkRelayedTable(outcome, size, outcomes.front().table.channels);
    const bool orphan = rank >= 5 && rank <= 8;
    CHECK(outcome.tableReads == (orphan ? 1 : 0));
    CHECK(outcome.storeOperations <= kRendezvousStoreOpsPerRank + 1);
  }
}

TEST_CASE("relayed rendezvous: a rank whose parent dies before relaying reads the table from the store at once",
          "[setup][relay]") {
  // Rank 1 (parent of rank 5) names a forked process as its own, publishes
  // its part and forwards nothing; then that process is killed. Rank 5
  // watches it (another process on this host): its death ends rank 5's
  // wait for the relay, and rank 5 reads the complete table from the store
  // instead of waiting for the 60 s timeout. (Its first look at the store
  // is set to come later than that.)
  SleepingChild standIn;
  const ProcessIdentity standInProcess = standIn.identity();
  REQUIRE(standInProcess.known());
  MemoryStore store;
  const int size = 6;
  const auto outcomes = runRelayedGroup(
      store, size,
      [](int rank) {
        RelayOptions options;
        options.forward = rank != 1;
        options.firstStoreLook = 120s;
        return options;
      },
      {}, [&](int rank) { return rank == 1 ? standInProcess : thisProcess(); },
      [&](int rank) {
        if (rank == 1) {
          standIn.kill();
        }
      });
  for (int rank = 0; rank < size; ++rank) {
    const RelayedOutcome& outcome = outcomes[static_cast<std::size_t>(rank)];
    INFO("rank " << rank << ": " << outcome.error);
    checkRelayedTable(outcome, size, outcomes.front().table.channels);
    CHECK(outcome.tableReads == (rank == 5 ? 1 : 0));
  }
}

TEST_CASE("relayed rendezvous: a table relayed for an earlier group on the same channel is never taken",
          "[setup][relay]") {
  // Two ranks, the same engines, and rank 1 on the same channel both
  // times. First group: rank 1 takes the table from the store at once
  // (first look at 0 ms), so rank 0's relay stays unreceived on rank 1's
  // channel. Second group: rank 0 gives another channel, and rank 1 waits
  // for the relay; it must get the second table (rank 0's new channel),
  // not the first one waiting there with the same tag but its relay key.
  LoopbackFabric fabric;
  std::vector<std::unique_ptr<Engine>> engines;
  for (int rank = 0; rank < 2; ++rank) {
    engines.push_back(std::make_unique<Engine>(fabric.attach()));
  }
  MemoryStore store;
  const uint32_t rankOneChannel = engines[1]->openChannel();
  std::vector<uint32_t> rankZeroChannels{engines[0]->openChannel(), engines[0]->openChannel()};
  std::vector<std::vector<uint32_t>> seen(2);
  for (int group = 0; group < 2; ++group) {
    auto failures = runRanks(2, [&](int rank) {
      CountingStore mine(store);
      RelayOptions options;
      options.firstStoreLook = group == 0 && rank == 1 ? 0ms : 60s;
      const uint32_t channel = rank == 0 ? rankZeroChannels[static_cast<std::size_t>(group)] : rankOneChannel;
      const GroupRendezvous table =
          relayedRendezvous(mine, *engines[static_cast<std::size_t>(rank)], rank, 2, channel, "lo", 60s, options);
      if (rank == 1) {
        seen[static_cast<std::size_t>(group)] = table.channels;
        expect(mine.tableReads == (group == 0 ? 1 : 0), "the first table from the store, the second relayed");
      }
    });
    checkNoFailures(failures);
    std::this_thread::sleep_for(100ms);  // the first relay has arrived at rank 1 by now
  }
  CHECK(seen[0] == std::vector<uint32_t>{rankZeroChannels[0], rankOneChannel});
  CHECK(seen[1] == std::vector<uint32_t>{rankZeroChannels[1], rankOneChannel});
  for (auto& engine : engines) {
    engine->stop();
  }
}

TEST_CASE("relayed rendezvous: a refusal reaches every rank down the tree, and each raises naming the refuser",
          "[setup][relay]") {
  for (int refuser : {0, 1, 6}) {
    MemoryStore store;
    const int size = 21;
    const auto outcomes = runRelayedGroup(store, size, {}, refusingAt(refuser));
    checkEveryRankNamesRefuser(outcomes, refuser);
  }
}

// A large job's start-up, simulated in this one process: UCXCOLL_SIM_RANKS
// ranks (64 unless set; `scripts/dev.sh startup-sim` runs 64, 256 and
// 1,024) as threads, each with its own engine over the loopback transport
// (no progress threads: each rank's thread drives its own engine), set up
// through one in-memory store as the backend sets a group up, then the
// first all_reduce (8 bytes, the algorithm the group would choose) and a
// barrier, checked. Prints when each was done on the slowest rank, the
// store operations per rank, and how many ranks a rank is connected to
// after setup, after the barrier, after making a subgroup of every rank
// from the group (new_group's exchange, engine/member_exchange.hpp) and
// after closing the group (above kEagerConnectMaxRanks the group connects
// lazily: a rank connects only to the O(log n) ranks the all_reduce, the
// barrier and the subgroup's exchange tree talk to, and closing the group
// connects no more). One process and one "store" on 2 cores: it
// measures the algorithm's shape (operations, rounds), not a cluster's
// network.
TEST_CASE("start-up simulation: a group of many ranks set up through the store, then all_reduce and barrier",
          "[setup][simulation]") {
  const char* setting = std::getenv("UCXCOLL_SIM_RANKS");
  const int n = setting != nullptr && std::atoi(setting) > 0 ? std::atoi(setting) : 64;
  MemoryStore store;
  LoopbackFabric fabric;
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<const LoopbackTransport*> transports;  // owned by the engines
  for (int rank = 0; rank < n; ++rank) {
    auto transport = fabric.attach();
    transports.push_back(transport.get());
    engines.push_back(std::make_unique<Engine>(std::move(transport), Engine::Threading::CallersOnly));
  }
  struct Milestones {
    double table = 0, group = 0, allreduce = 0, barrier = 0;
    int storeOperations = 0;
    std::size_t storeBytesRead = 0;
    int connectedAtSetup = 0, connectedAtEnd = 0, connectedAtSubgroup = 0, connectedAtClose = 0;
    // Messages this rank sent in setup, the all_reduce, the barrier, the
    // subgroup's exchange and the close.
    std::array<uint64_t, 5> messages{};
    // The channels the subgroup's exchange gave this rank, by rank.
    std::vector<uint32_t> subgroupChannels;
  };
  std::vector<uint32_t> subgroupChannelOf(static_cast<std::size_t>(n), 0);
  std::vector<Milestones> reached(static_cast<std::size_t>(n));
  const auto started = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  auto failures = runRanks(n, [&](int rank) {
    Engine& engine = *engines[static_cast<std::size_t>(rank)];
    Milestones& mine = reached[static_cast<std::size_t>(rank)];
    const LoopbackTransport& transport = *transports[static_cast<std::size_t>(rank)];
    uint64_t sentBefore = 0;
    auto messagesSince = [&] {
      const uint64_t sent = transport.messagesSent();
      return sent - std::exchange(sentBefore, sent);
    };
    CountingStore counted(store);
    const uint32_t channel = engine.openChannel();
    const GroupRendezvous table = relayedRendezvous(counted, engine, rank, n, channel, "lo", 600s);
    mine.storeOperations = counted.operations;
    mine.storeBytesRead = counted.bytesRead;
    mine.table = seconds();
    auto group = engine.createGroup("simulated", rank, n, channel,
                                    std::make_shared<const std::vector<std::vector<uint8_t>>>(table.addresses),
                                    table.channels, {}, {});
    mine.group = seconds();
    mine.connectedAtSetup = group->connectedRanks();
    mine.messages[0] = messagesSince();
    float values[2] = {static_cast<float>(rank), 1.0f};
    submitCollective(engine, group, "all_reduce", [&](Collective& c) {
      return selectAllreduce(c, values, 2, DataType::Float32, Reduction::Sum);
    }).wait(std::chrono::seconds(600));
    expect(values[0] == static_cast<float>(n) * static_cast<float>(n - 1) / 2 && values[1] == static_cast<float>(n),
           "all_reduce sums");
    mine.allreduce = seconds();
    mine.messages[1] = messagesSince();
    submitCollective(engine, group, "barrier", &barrierDissemination).wait(std::chrono::seconds(600));
    mine.barrier = seconds();
    mine.connectedAtEnd = group->connectedRanks();
    mine.messages[2] = messagesSince();
    // new_group(every rank): the members trade the channels they opened
    // for it over this group (along a tree where it connects lazily).
    const uint32_t subgroupChannel = engine.openChannel();
    subgroupChannelOf[static_cast<std::size_t>(rank)] = subgroupChannel;
    std::vector<int> everyRank(static_cast<std::size_t>(n));
    std::iota(everyRank.begin(), everyRank.end(), 0);
    auto traded = std::make_shared<std::vector<uint32_t>>();
    auto exchange = std::make_unique<MemberExchange>(group, NewGroupTerms::subgroup(std::move(everyRank), "everyone"),
                                                     subgroupChannel, 600s, traded);
    auto exchanged = exchange->sharedCompletion();
    const std::string exchangeName = exchange->name();
    { [[maybe_unused]] Engine::Lease none = engine.submit(std::move(exchange)); }
    Submitted(engine, exchanged, exchangeName).wait(std::chrono::seconds(600));
    mine.subgroupChannels = *traded;
    engine.releaseChannel(subgroupChannel);
    mine.connectedAtSubgroup = group->connectedRanks();
    mine.messages[3] = messagesSince();
    // destroy_process_group: the leave notice goes to the ranks this one
    // is connected to, not to every rank (engine/notices.cpp).
    engine.closeGroup(group, true, LeaveReason::Released);
    mine.connectedAtClose = group->connectedRanks();
    mine.messages[4] = messagesSince();
  });
  checkNoFailures(failures);
  Milestones slowest;
  std::size_t mostBytesBelowRoot = 0;
  for (std::size_t rank = 1; rank < reached.size(); ++rank) {
    mostBytesBelowRoot = std::max(mostBytesBelowRoot, reached[rank].storeBytesRead);
  }
  for (const Milestones& rank : reached) {
    slowest.table = std::max(slowest.table, rank.table);
    slowest.group = std::max(slowest.group, rank.group);
    slowest.allreduce = std::max(slowest.allreduce, rank.allreduce);
    slowest.barrier = std::max(slowest.barrier, rank.barrier);
    slowest.storeOperations = std::max(slowest.storeOperations, rank.storeOperations);
    slowest.connectedAtSetup = std::max(slowest.connectedAtSetup, rank.connectedAtSetup);
    slowest.connectedAtEnd = std::max(slowest.connectedAtEnd, rank.connectedAtEnd);
    slowest.connectedAtSubgroup = std::max(slowest.connectedAtSubgroup, rank.connectedAtSubgroup);
    slowest.connectedAtClose = std::max(slowest.connectedAtClose, rank.connectedAtClose);
    for (std::size_t phase = 0; phase < rank.messages.size(); ++phase) {
      slowest.messages[phase] = std::max(slowest.messages[phase], rank.messages[phase]);
    }
    // Setup: the table to each of at most 4 children in the setup tree, in
    // one message or, above 64 KiB, two, whatever the group's size.
    CHECK(rank.messages[0] <= 8);
    // The ranks are threads of one process, so none watches its parent:
    // one that waits long for the relay looks for the table in the store.
    CHECK(rank.storeOperations <= kRendezvousStoreOpsPerRank + storeLooksWithin(std::chrono::milliseconds(
                                                                   static_cast<int64_t>(rank.table * 1000) + 1)));
    CHECK(rank.subgroupChannels == subgroupChannelOf);
    if (n <= kEagerConnectMaxRanks) {
      CHECK(rank.connectedAtSetup == n);
    } else {
      // Itself; recursive doubling's partners and the fold partner; the
      // dissemination barrier's 2 log2(n) neighbours.
      const int rounds = static_cast<int>(std::ceil(std::log2(n)));
      CHECK(rank.connectedAtSetup == 1);
      CHECK(rank.connectedAtEnd <= 2 + 3 * rounds);
      // At most its parent and log2(n) children in the exchange's tree.
      CHECK(rank.connectedAtSubgroup <= rank.connectedAtEnd + 1 + rounds);
      CHECK(rank.connectedAtClose == rank.connectedAtSubgroup);
    }
  }
  std::printf(
      "start-up simulation, %d ranks as threads: address table complete at %.3f s, group set up at %.3f s, first "
      "all_reduce done at %.3f s, barrier at %.3f s (slowest rank, from the start); at most %d store operations per "
      "rank; store bytes read: %zu by rank 0 (the whole table), at most %zu by any other rank; connected to at most "
      "%d ranks after setup, %d after the barrier, %d after a subgroup of every rank, %d after closing the group; "
      "messages sent per rank, at most: %llu in setup, %llu in the all_reduce, %llu in the barrier, %llu making the "
      "subgroup, %llu closing the group\n",
      n, slowest.table, slowest.group, slowest.allreduce, slowest.barrier, slowest.storeOperations,
      reached.front().storeBytesRead, mostBytesBelowRoot, slowest.connectedAtSetup, slowest.connectedAtEnd,
      slowest.connectedAtSubgroup, slowest.connectedAtClose, static_cast<unsigned long long>(slowest.messages[0]),
      static_cast<unsigned long long>(slowest.messages[1]), static_cast<unsigned long long>(slowest.messages[2]),
      static_cast<unsigned long long>(slowest.messages[3]), static_cast<unsigned long long>(slowest.messages[4]));
  for (auto& engine : engines) {
    engine->stop();
  }
}
