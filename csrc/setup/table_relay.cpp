#include "setup/table_relay.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/logging.hpp"
#include "engine/engine.hpp"
#include "engine/operation.hpp"
#include "transport/tag.hpp"

namespace ucxcoll {
namespace {

using Clock = std::chrono::steady_clock;

// How often a rank waiting for the relay looks whether a rank it watches
// died (a flag, no store operation), in case the death came before the
// receive had started (the death listener ends the wait otherwise).
constexpr auto kDeathPoll = std::chrono::seconds(1);

// How long past its first look a rank waits for a child it cannot reach to
// take the table from the store, and how often it looks whether it has.
constexpr auto kTakenBound = std::chrono::seconds(2);
constexpr auto kTakenPoll = std::chrono::milliseconds(100);

// The tag's value: the receiver's relay key (TreeRendezvous::relayKey) and
// which message.
constexpr uint32_t kFirstValue = 0;
constexpr uint32_t kRestValue = 1;
constexpr uint32_t tagValue(uint32_t relayKey, uint32_t which) {
  return relayKey << 1 | which;
}

// The first message holds the table's length (8 bytes) and, where it fits
// in kInlineBytes (about 200 ranks' entries), the table: one message per
// hop. A larger table follows in a second message of its own.
constexpr std::size_t kLengthBytes = sizeof(uint64_t);
constexpr std::size_t kInlineBytes = 64 * 1024;

std::vector<uint8_t> firstMessage(const std::vector<uint8_t>& table) {
  const uint64_t length = table.size();
  const bool inline_ = kLengthBytes + table.size() <= kInlineBytes;
  std::vector<uint8_t> first(kLengthBytes + (inline_ ? table.size() : 0));
  std::memcpy(first.data(), &length, kLengthBytes);
  if (inline_ && !table.empty()) {
    std::memcpy(first.data() + kLengthBytes, table.data(), table.size());
  }
  return first;
}

// What the receive leaves for the rank that waits for it.
struct Received {
  std::vector<uint8_t> table;
  // The operation's number, once it started (Engine::abortOperation).
  std::atomic<uint64_t> serial{0};
};

// This rank's parent sends it the table: its length, then the table.
class TableReceive final : public Operation {
 public:
  TableReceive(uint32_t channel, uint32_t relayKey, int parent, std::chrono::milliseconds timeout,
               std::shared_ptr<Received> received)
      : Operation(Kind::Control, nullptr, timeout),
        channel_(channel),
        relayKey_(relayKey),
        parent_(parent),
        received_(std::move(received)) {}

 protected:
  Task run() override {
    received_->serial.store(serial());
    const auto from = static_cast<uint32_t>(parent_);
    // The first message: the table's length and, where it fits, the table.
    std::vector<uint8_t>& first = received_->table;
    first.resize(kInlineBytes);
    Request& head = recvUpTo(-1, tag::internal(channel_, tag::kSetupTable, tagValue(relayKey_, kFirstValue), from),
                             tag::kMatchAll, first.data(), first.size());
    co_await head;
    if (head.result().status != TransferStatus::Ok || head.result().length < kLengthBytes) {
      first.clear();  // failed (the engine says why), or malformed: finish() says so
      co_return;
    }
    uint64_t length = 0;
    std::memcpy(&length, first.data(), kLengthBytes);
    if (head.result().length == kLengthBytes + length) {
      first.resize(head.result().length);
      first.erase(first.begin(), first.begin() + kLengthBytes);
      co_return;
    }
    // Too large to go inline: the table follows on its own.
    received_->table.assign(length, 0);
    co_await recvTagged(-1, tag::internal(channel_, tag::kSetupTable, tagValue(relayKey_, kRestValue), from),
                        tag::kMatchAll, received_->table.data(), received_->table.size());
  }
  std::string describe() const override {
    return "group setup: the receive of the address table from rank " + std::to_string(parent_) +
           " (this rank's parent in the setup tree)";
  }

 private:
  const uint32_t channel_;
  const uint32_t relayKey_;
  const int parent_;
  const std::shared_ptr<Received> received_;
};

// Sends one child the table. One operation per child: a child that died
// fails its own send, not its siblings'.
class TableSend final : public Operation {
 public:
  TableSend(int rank, TreeRendezvous::Child child, PeerHandle to, std::shared_ptr<const std::vector<uint8_t>> table,
            std::chrono::milliseconds timeout)
      : Operation(Kind::Control, nullptr, timeout),
        rank_(rank),
        child_(std::move(child)),
        to_(to),
        table_(std::move(table)),
        first_(firstMessage(*table_)) {}

 protected:
  Task run() override {
    const auto from = static_cast<uint32_t>(rank_);
    auto tagOf = [&](uint32_t which) {
      return tag::internal(child_.channel, tag::kSetupTable, tagValue(child_.relayKey, which), from);
    };
    sendToProcess(to_, child_.rank, tagOf(kFirstValue), first_.data(), first_.size());
    if (first_.size() == kLengthBytes) {
      sendToProcess(to_, child_.rank, tagOf(kRestValue), table_->data(), table_->size());
    }
    co_await all();
  }
  std::string describe() const override {
    return "group setup: the send of the address table to rank " + std::to_string(child_.rank);
  }

 private:
  const int rank_;
  const TreeRendezvous::Child child_;
  const PeerHandle to_;
  const std::shared_ptr<const std::vector<uint8_t>> table_;
  const std::vector<uint8_t> first_;
};

std::vector<uint8_t> takeFromStore(TreeRendezvous& tree) {
  std::vector<uint8_t> table = tree.readTable();
  tree.noteTableTaken();
  return table;
}

// The table from this rank's parent, or from the store where the relay
// does not come (see table_relay.hpp).
std::vector<uint8_t> awaitTable(TreeRendezvous& tree, Engine& engine, uint32_t channel,
                                std::chrono::milliseconds timeout, const RelayOptions& options) {
  auto received = std::make_shared<Received>();
  // Its own deadline comes after this rank's, which decides.
  auto receive = std::make_unique<TableReceive>(channel, tree.relayKey(), tree.parent(),
                                                timeout + std::chrono::minutes(1), received);
  auto completion = receive->sharedCompletion();
  (void)engine.submit(std::move(receive));
  auto giveUp = [&engine, received](const std::string& why) {
    // Zero only before the receive starts, which it does at once unless
    // the engine is stopping (it then fails anyway).
    if (const uint64_t serial = received->serial.load()) {
      engine.abortOperation(serial, why);
    }
  };
  // A watched rank's death ends the wait at once: a dead parent sends
  // nothing, and the death is in the store (as its part, where it had none
  // yet), so the table will be too.
  tree.setDeathListener([giveUp] { giveUp("a rank it waited for died; the table is read from the store"); });
  struct StopListening {
    TreeRendezvous& tree;
    ~StopListening() { tree.setDeathListener({}); }
  } stopListening{tree};

  const auto started = Clock::now();
  const auto deadline = started + timeout;
  auto step = std::chrono::duration_cast<Clock::duration>(options.firstStoreLook);
  auto look = started + step;
  for (;;) {
    const auto now = Clock::now();
    const bool done = engine.wait(*completion, std::min({look, deadline, now + kDeathPoll}));
    if (done && !completion->error()) {
      return std::move(received->table);
    }
    if (tree.sawDeath()) {
      giveUp("a rank it waited for died; the table is read from the store");
      return takeFromStore(tree);
    }
    if (done) {
      // The relay failed here (a malformed message, the engine stopping):
      // the store has the table, or will.
      try {
        std::rethrow_exception(completion->error());
      } catch (const std::exception& error) {
        UCXCOLL_WARN("group setup: the address table from rank " << tree.parent() << " did not arrive (" << error.what()
                                                                 << "); reading it from the store");
      }
      return takeFromStore(tree);
    }
    if (Clock::now() >= look) {
      if (tree.tableInStore()) {
        UCXCOLL_INFO("group setup: the address table did not come from rank "
                     << tree.parent() << " (this rank's parent in the setup tree) within "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count()
                     << " ms; read from the store instead");
        giveUp("the table was read from the store");
        return takeFromStore(tree);
      }
      step *= 2;
      look = Clock::now() + step;
    }
    if (Clock::now() >= deadline) {
      giveUp("timed out");
      if (tree.tableInStore()) {
        return takeFromStore(tree);  // a parent on this host that lives but never sent it
      }
      throw std::runtime_error("timed out after " + std::to_string(timeout.count()) +
                               " ms waiting for the group's address table: rank " + std::to_string(tree.parent()) +
                               " (this rank's parent in the setup tree) did not send it, and rank 0 has not "
                               "published it in the store (a rank has not joined yet)");
    }
  }
}

}  // namespace

int storeLooksWithin(std::chrono::milliseconds waited, const RelayOptions& options) {
  int looks = 0;
  for (auto at = options.firstStoreLook, step = options.firstStoreLook; at <= waited; step *= 2, at += step) {
    ++looks;
  }
  return looks;
}

GroupRendezvous relayedRendezvous(KeyValueStore& store, Engine& engine, int rank, int size, uint32_t myChannel,
                                  const std::string& myNetworkInterfaces, std::chrono::milliseconds timeout,
                                  const RelayOptions& options, const ProcessIdentity& myProcess) {
  TreeRendezvous tree(store, rank, size, engine.address(), myChannel, myNetworkInterfaces, myProcess);
  auto table = std::make_shared<const std::vector<uint8_t>>(
      rank == 0 ? tree.ownTable() : awaitTable(tree, engine, myChannel, timeout, options));
  // Forwarded before it is read: a table that makes this rank raise makes
  // its children raise too.
  std::vector<int> unreachable;
  if (options.forward) {
    for (const TreeRendezvous::Child& child : tree.children(*table)) {
      PeerHandle to = nullptr;
      try {
        to = engine.connect(child.address, child.onOtherHost ? PeerLocation::OtherHost : PeerLocation::ThisHost);
      } catch (const std::exception& error) {
        // The group's own connect finds it too and says so.
        UCXCOLL_DEBUG("group setup: cannot send rank " << child.rank << " the address table: " << error.what());
        unreachable.push_back(child.rank);
        continue;
      }
      const int childRank = child.rank;
      auto send = std::make_unique<TableSend>(rank, child, to, table, timeout);
      send->onComplete = [child = childRank](const std::exception_ptr& error) {
        if (error) {
          try {
            std::rethrow_exception(error);
          } catch (const std::exception& failure) {
            // It takes the table from the store, or is dead: the group's
            // setup finds out.
            UCXCOLL_DEBUG("group setup: could not send rank " << child << " the address table: " << failure.what());
          }
        }
      };
      (void)engine.submit(std::move(send));
    }
  }
  // A child this rank cannot reach takes the table from the store, which
  // must still be there when it looks: this rank may hold the store (rank
  // 0 under init_process_group) and is about to raise (its group cannot
  // reach that child either). So it waits, boundedly, until the child has.
  for (int child : unreachable) {
    const auto bound = Clock::now() + options.firstStoreLook + kTakenBound;
    while (!tree.childTookTable(child) && Clock::now() < bound) {
      std::this_thread::sleep_for(kTakenPoll);
    }
  }
  return tree.finish(*table);
}

}  // namespace ucxcoll
