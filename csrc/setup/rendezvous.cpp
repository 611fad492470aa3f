#include "setup/rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "common/config.hpp"
#include "common/cores.hpp"
#include "common/logging.hpp"

namespace ucxcoll {
namespace {

std::string hostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Ranks whose processes run under one kernel share its boot id: the
// machine (or VM) whose cores they share. The hostname stands in where the
// boot id cannot be read.
std::string hostIdentity() {
  std::ifstream bootId("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (std::getline(bootId, id) && !id.empty()) {
    return id;
  }
  return hostName();
}

void putUint(std::vector<uint8_t>& out, uint32_t value, int bytes) {
  for (int byte = 0; byte < bytes; ++byte) {
    out.push_back(static_cast<uint8_t>(value >> (8 * byte)));
  }
}

uint32_t getUint(const std::vector<uint8_t>& in, std::size_t at, int bytes) {
  uint32_t value = 0;
  for (int byte = 0; byte < bytes; ++byte) {
    value |= static_cast<uint32_t>(in.at(at + static_cast<std::size_t>(byte))) << (8 * byte);
  }
  return value;
}

// A text field: a 2-byte length and the bytes.
void putText(std::vector<uint8_t>& out, const std::string& text) {
  putUint(out, static_cast<uint32_t>(text.size()), 2);
  out.insert(out.end(), text.begin(), text.end());
}

// The text field at `at` (advanced past it); nullopt where `in` ends first.
std::optional<std::string> getText(const std::vector<uint8_t>& in, std::size_t& at) {
  if (in.size() < at + 2 || in.size() < at + 2 + getUint(in, at, 2)) {
    return std::nullopt;
  }
  const std::size_t length = getUint(in, at, 2);
  std::string text(in.begin() + static_cast<long>(at + 2), in.begin() + static_cast<long>(at + 2 + length));
  at += 2 + length;
  return text;
}

// A process: its pid (4 bytes) and start time (8), 12 bytes in all.
constexpr std::size_t kProcessBytes = 12;

void putProcess(std::vector<uint8_t>& out, const ProcessIdentity& process) {
  putUint(out, static_cast<uint32_t>(process.pid), 4);
  putUint(out, static_cast<uint32_t>(process.startTime), 4);
  putUint(out, static_cast<uint32_t>(process.startTime >> 32), 4);
}

// The process at `at`; the caller has checked that kProcessBytes are there.
ProcessIdentity getProcess(const std::vector<uint8_t>& in, std::size_t at) {
  return ProcessIdentity{static_cast<pid_t>(getUint(in, at, 4)),
                         getUint(in, at + 4, 4) | (uint64_t{getUint(in, at + 8, 4)} << 32)};
}

// The first 4 bytes of an entry that says why its rank cannot take part,
// where a real one has its channel number: the rank refused (a setting it
// cannot use, no UCX), or a rank that watched its process saw it die.
constexpr uint32_t kRefusalMark = 0xFFFFFFFFu;
constexpr uint32_t kDeathMark = 0xFFFFFFFEu;

// Mark (4 bytes), the rank's hostname (a 2-byte length and the bytes), why.
std::vector<uint8_t> refusalEntry(uint32_t mark, const std::string& host, const std::string& why) {
  std::vector<uint8_t> entry;
  putUint(entry, mark, 4);
  putText(entry, host);
  entry.insert(entry.end(), why.begin(), why.end());
  return entry;
}

// Every rank that refuses, or reads a refusal, counts itself under this
// key, and each waits (boundedly) until all ranks have: the process that
// holds the store (rank 0's, under init_process_group) would otherwise
// raise, exit and take the store along while a peer still reads the
// refusal, which that peer then never sees ("Failed to recv, got 0 bytes"
// instead). A store that goes away meanwhile ends the wait: the refusal
// was read.
constexpr auto kRefusalReadBound = std::chrono::seconds(2);

void countAndAwaitRefusalReaders(KeyValueStore& store, const std::string& prefix, int readers) {
  const std::string key = prefix + "refusal_known";
  const auto giveUp = std::chrono::steady_clock::now() + kRefusalReadBound;
  try {
    int64_t increment = 1;
    while (store.add(key, increment) < readers && std::chrono::steady_clock::now() < giveUp) {
      increment = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const std::exception& error) {
    UCXCOLL_DEBUG("stopped waiting for the group's ranks to read a refusal: " << error.what());
  }
}

// The keys of this incarnation of the group. A store can outlive a group
// (torchrun's agent store survives destroy_process_group +
// init_process_group), so keys from an earlier incarnation of the same
// group name may still be there. Every rank bumps a join counter once;
// ranks of the same incarnation get the same quotient.
std::string incarnationPrefix(KeyValueStore& store, int size) {
  int64_t joined = store.add("ucxcoll/joined", 1);
  return "ucxcoll/" + std::to_string((joined - 1) / size) + "/";
}

// The tree: rank r's children are r*F+1 .. r*F+F; rank 0 is the root.
std::vector<int> treeChildren(int rank, int size) {
  std::vector<int> children;
  for (int child = rank * kRendezvousFanOut + 1; child <= rank * kRendezvousFanOut + kRendezvousFanOut && child < size;
       ++child) {
    children.push_back(child);
  }
  return children;
}

// A part of the table: records of (rank: 4 bytes, length: 4 bytes, entry).
void appendRecord(std::vector<uint8_t>& part, int rank, const std::vector<uint8_t>& entry) {
  putUint(part, static_cast<uint32_t>(rank), 4);
  putUint(part, static_cast<uint32_t>(entry.size()), 4);
  part.insert(part.end(), entry.begin(), entry.end());
}

std::string partKey(const std::string& prefix, int rank) {
  return rank == 0 ? prefix + "table" : prefix + "part/" + std::to_string(rank);
}

// Who a rank that waits for others is: its host identity and pid
// namespace (where its pid means something), its hostname, its pid and
// start time. Each such rank publishes it under whoKey as soon as it joins,
// so that a rank waiting for its part can watch its process.
std::string whoKey(const std::string& prefix, int rank) {
  return prefix + "who/" + std::to_string(rank);
}

// A rank's entry in the table, read back (the layout is written in
// TreeRendezvous's constructor); nullopt where it is cut short.
struct Entry {
  uint32_t channel = 0;
  std::string host, pidNamespace, settings, hostName, networkInterfaces;
  ProcessIdentity process;
  uint32_t cores = 0;
  uint32_t relayKey = 0;
  std::vector<uint8_t> address;
};

std::optional<Entry> parseEntry(const std::vector<uint8_t>& value) {
  Entry entry;
  if (value.size() < 4) {
    return std::nullopt;
  }
  entry.channel = getUint(value, 0, 4);
  std::size_t at = 4;
  for (std::string* text :
       {&entry.host, &entry.pidNamespace, &entry.settings, &entry.hostName, &entry.networkInterfaces}) {
    std::optional<std::string> read = getText(value, at);
    if (!read) {
      return std::nullopt;
    }
    *text = std::move(*read);
  }
  if (value.size() < at + kProcessBytes + 8) {
    return std::nullopt;
  }
  entry.process = getProcess(value, at);
  entry.cores = getUint(value, at + kProcessBytes, 4);
  entry.relayKey = getUint(value, at + kProcessBytes + 4, 4);
  entry.address.assign(value.begin() + static_cast<long>(at + kProcessBytes + 8), value.end());
  return entry;
}

std::string tookTableKey(const std::string& prefix, int rank) {
  return prefix + "took_table/" + std::to_string(rank);
}

struct Who {
  std::string hostIdentity;
  std::string pidNamespace;
  std::string hostName;
  ProcessIdentity process;
};

std::vector<uint8_t> encodeWho(const Who& who) {
  std::vector<uint8_t> value;
  for (const std::string* text : {&who.hostIdentity, &who.pidNamespace, &who.hostName}) {
    putText(value, *text);
  }
  putProcess(value, who.process);
  return value;
}

Who decodeWho(const std::vector<uint8_t>& value, int rank) {
  Who who;
  std::size_t at = 0;
  auto malformed = [rank] {
    return std::runtime_error("malformed rendezvous identity of rank " + std::to_string(rank));
  };
  for (std::string* text : {&who.hostIdentity, &who.pidNamespace, &who.hostName}) {
    std::optional<std::string> read = getText(value, at);
    if (!read) {
      throw malformed();
    }
    *text = std::move(*read);
  }
  if (value.size() < at + kProcessBytes) {
    throw malformed();
  }
  who.process = getProcess(value, at);
  return who;
}

// While this rank waits in the rendezvous, watches the processes of the
// ranks it waits for (its children that wait for children of their own,
// and rank 0 for rank 0's children) where it can: on this host, in this
// pid namespace. A rank that dies before publishing its part would
// otherwise hold every rank until the store's timeout; when one dies, this
// publishes a death record as its part (if it has none yet), which ends up
// in the table and makes every rank raise, naming it.
class SetupWatch {
 public:
  SetupWatch(KeyValueStore& store, std::string prefix, const Who& self)
      : store_(store), prefix_(std::move(prefix)), self_(self) {}

  void watch(int rank, const Who& who) {
    if (who.hostIdentity != self_.hostIdentity || who.pidNamespace.empty() || who.pidNamespace != self_.pidNamespace ||
        who.process == self_.process) {
      return;  // another host or pid namespace (its pid means nothing here), or this process
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      watched_.push_back({rank, who});
    }
    if (!peers_) {
      peers_ = std::make_unique<PeerWatch>([this](const ProcessIdentity& dead) { died(dead, false); });
    }
    if (!peers_->watch(who.process)) {
      died(who.process, true);
    }
  }

  // Whether a watched rank died (and its death is in the store where its
  // part was missing): the table may then be in the store without ever
  // being relayed (setup/table_relay.hpp).
  bool sawDeath() const { return sawDeath_.load(); }
  // Called (on the watch's thread, or here if one died already) once a
  // watched rank has died; empty: nobody to call.
  void setDeathListener(std::function<void()> listener) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      deathListener_ = listener;
    }
    if (listener && sawDeath_.load()) {
      listener();
    }
  }

 private:
  void died(const ProcessIdentity& process, bool onWaitingThread) {
    int rank = -1;
    std::string hostName;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [watchedRank, who] : watched_) {
        if (who.process == process) {
          rank = watchedRank;
          hostName = who.hostName;
        }
      }
    }
    if (rank < 0) {
      return;
    }
    try {
      // The waiting thread may be inside the store's get (which holds the
      // connection): the watch's own thread writes through another one.
      std::lock_guard<std::mutex> lock(writerMutex_);
      if (!onWaitingThread && !writer_) {
        writer_ = store_.connectAnother();
        if (!writer_) {
          UCXCOLL_WARN("rank " << rank << " (pid " << process.pid << ") died during the group's setup, but the "
                               << "store cannot make a second connection to say so: the other ranks wait for it "
                               << "until the store's timeout");
          return;
        }
      }
      KeyValueStore& writer = onWaitingThread ? store_ : *writer_;
      std::vector<uint8_t> part;
      appendRecord(part, rank,
                   refusalEntry(kDeathMark, hostName,
                                "its process (pid " + std::to_string(process.pid) +
                                    ") exited while the group was being set up"));
      (void)writer.setIfAbsent(partKey(prefix_, rank), part);
    } catch (const std::exception& error) {
      UCXCOLL_WARN("could not tell the group that rank " << rank << " died during setup: " << error.what());
    }
    std::function<void()> listener;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sawDeath_.store(true);
      listener = deathListener_;
    }
    if (listener) {
      listener();
    }
  }

  KeyValueStore& store_;
  const std::string prefix_;
  const Who self_;
  std::mutex mutex_;
  std::vector<std::pair<int, Who>> watched_;  // guarded by mutex_
  std::function<void()> deathListener_;       // guarded by mutex_
  std::mutex writerMutex_;
  std::unique_ptr<KeyValueStore> writer_;  // guarded by writerMutex_
  std::atomic<bool> sawDeath_{false};
  // Last: destroyed first, so that its thread (which calls died()) stops
  // before the members above go.
  std::unique_ptr<PeerWatch> peers_;
};

// Publishes this rank's part of the table: its entry and its subtree's
// (each child's part, once published), and returns it. A refusal does not
// wait for its subtree: the table it ends up in makes every rank raise
// anyway.
std::vector<uint8_t> publishPart(KeyValueStore& store, const std::string& prefix, int rank, int size,
                                 const std::vector<uint8_t>& entry, bool withSubtree) {
  std::vector<uint8_t> part;
  appendRecord(part, rank, entry);
  if (withSubtree) {
    for (int child : treeChildren(rank, size)) {
      const std::vector<uint8_t> childPart = store.get(partKey(prefix, child));
      part.insert(part.end(), childPart.begin(), childPart.end());
    }
  }
  store.set(partKey(prefix, rank), part);
  return part;
}

// Every rank's entry, by rank, from the whole table (absent only where a
// refusal cut a subtree off).
std::vector<std::optional<std::vector<uint8_t>>> splitTable(const std::vector<uint8_t>& table, int size) {
  std::vector<std::optional<std::vector<uint8_t>>> entries(static_cast<std::size_t>(size));
  std::size_t at = 0;
  while (at < table.size()) {
    if (table.size() < at + 8) {
      throw std::runtime_error("malformed rendezvous table (a record is cut short)");
    }
    const uint32_t rank = getUint(table, at, 4);
    const std::size_t length = getUint(table, at + 4, 4);
    if (rank >= static_cast<uint32_t>(size) || entries[rank] || table.size() < at + 8 + length) {
      throw std::runtime_error("malformed rendezvous table (record of rank " + std::to_string(rank) + ")");
    }
    entries[rank].emplace(table.begin() + static_cast<long>(at + 8),
                          table.begin() + static_cast<long>(at + 8 + length));
    at += 8 + length;
  }
  return entries;
}

}  // namespace

void publishSetupFailure(KeyValueStore& store, int rank, int size, const std::string& why) {
  try {
    const std::string prefix = incarnationPrefix(store, size);
    if (!treeChildren(rank, size).empty()) {
      // Ranks that wait for this one read who it is first.
      store.set(whoKey(prefix, rank),
                encodeWho(Who{hostIdentity(), pidNamespaceIdentity(), hostName(), thisProcess()}));
    }
    (void)publishPart(store, prefix, rank, size, refusalEntry(kRefusalMark, hostName(), why), false);
    countAndAwaitRefusalReaders(store, prefix, size);
  } catch (const std::exception& error) {
    UCXCOLL_DEBUG("could not tell the group's other ranks why this one cannot take part: " << error.what());
  }
}

struct TreeRendezvous::State {
  State(KeyValueStore& store, std::string prefix, const Who& self)
      : store(store), prefix(std::move(prefix)), watch(store, this->prefix, self) {}
  KeyValueStore& store;
  const std::string prefix;
  SetupWatch watch;
};

TreeRendezvous::TreeRendezvous(KeyValueStore& store, int rank, int size, const std::vector<uint8_t>& myAddress,
                               uint32_t myChannel, const std::string& myNetworkInterfaces,
                               const ProcessIdentity& myProcess)
    : rank_(rank),
      size_(size),
      host_(hostIdentity()),
      pidNamespace_(pidNamespaceIdentity()),
      relayKey_(std::random_device{}() & kMaxRelayKey) {
  const std::string prefix = incarnationPrefix(store, size);

  // Entry: the channel (4 bytes, little-endian); the host identity, the
  // pid namespace identity, the group-wide settings, the hostname and the
  // network devices in use (each a 2-byte length and the bytes; the last
  // two for errors);
  // the pid (4 bytes), its start time (8) and the cores it may use (4);
  // the relay key (4); then the worker address.
  const std::string settings = groupWideSettings(config());
  const std::string name = hostName();
  const ProcessIdentity& me = myProcess;
  std::vector<uint8_t> mine;
  putUint(mine, myChannel, 4);
  for (const std::string* text : {&host_, &pidNamespace_, &settings, &name, &myNetworkInterfaces}) {
    putText(mine, *text);
  }
  putProcess(mine, me);
  putUint(mine, static_cast<uint32_t>(usableCores()), 4);
  putUint(mine, relayKey_, 4);
  mine.insert(mine.end(), myAddress.begin(), myAddress.end());

  // A rank that waits for others says who it is, and watches those it
  // waits for (SetupWatch): its children that have children of their own
  // (a leaf publishes its part as soon as it joins, so nobody waits on a
  // leaf that is alive), and its parent, which sends it the table.
  const Who self{host_, pidNamespace_, name, me};
  const std::vector<int> children = treeChildren(rank, size);
  if (!children.empty()) {
    store.set(whoKey(prefix, rank), encodeWho(self));
  }
  state_ = std::make_unique<State>(store, prefix, self);
  if (rank > 0) {
    state_->watch.watch(parent(), decodeWho(store.get(whoKey(prefix, parent())), parent()));
  }
  for (int child : children) {
    if (!treeChildren(child, size).empty()) {
      state_->watch.watch(child, decodeWho(store.get(whoKey(prefix, child)), child));
    }
  }
  std::vector<uint8_t> part = publishPart(store, prefix, rank, size, mine, true);
  if (rank == 0) {
    ownTable_ = std::move(part);
  }
}

TreeRendezvous::~TreeRendezvous() = default;

int TreeRendezvous::parent() const {
  return rank_ == 0 ? -1 : (rank_ - 1) / kRendezvousFanOut;
}

bool TreeRendezvous::tableInStore() {
  return state_->store.check(partKey(state_->prefix, 0));
}

std::vector<uint8_t> TreeRendezvous::readTable() {
  return state_->store.get(partKey(state_->prefix, 0));
}

void TreeRendezvous::noteTableTaken() {
  state_->store.set(tookTableKey(state_->prefix, rank_), {});
}

bool TreeRendezvous::childTookTable(int child) {
  return state_->store.check(tookTableKey(state_->prefix, child));
}

bool TreeRendezvous::sawDeath() const {
  return state_->watch.sawDeath();
}

void TreeRendezvous::setDeathListener(std::function<void()> listener) {
  state_->watch.setDeathListener(std::move(listener));
}

std::vector<TreeRendezvous::Child> TreeRendezvous::children(const std::vector<uint8_t>& table) const {
  const auto entries = splitTable(table, size_);
  std::vector<Child> children;
  for (int rank : treeChildren(rank_, size_)) {
    const auto& value = entries[static_cast<std::size_t>(rank)];
    if (!value || value->size() < 4) {
      continue;  // cut off by a refusal above it
    }
    const uint32_t mark = getUint(*value, 0, 4);
    if (mark == kRefusalMark || mark == kDeathMark) {
      continue;  // it refused or died: nobody to send to
    }
    std::optional<Entry> entry = parseEntry(*value);
    if (!entry) {
      continue;  // malformed: finish() says so
    }
    children.push_back(Child{rank, entry->channel, entry->relayKey, entry->host != host_ || config().peersOnOtherHosts,
                             std::move(entry->address)});
  }
  return children;
}

GroupRendezvous rendezvous(KeyValueStore& store, int rank, int size, const std::vector<uint8_t>& myAddress,
                           uint32_t myChannel, const std::string& myNetworkInterfaces,
                           const ProcessIdentity& myProcess) {
  TreeRendezvous tree(store, rank, size, myAddress, myChannel, myNetworkInterfaces, myProcess);
  return tree.finish(rank == 0 ? tree.ownTable() : tree.readTable());
}

GroupRendezvous TreeRendezvous::finish(const std::vector<uint8_t>& table) {
  KeyValueStore& store = state_->store;
  const std::string& prefix = state_->prefix;
  const int rank = rank_;
  const int size = size_;
  const std::string& host = host_;
  const std::string& pidNamespace = pidNamespace_;
  const std::string settings = groupWideSettings(config());
  const auto entries = splitTable(table, size);

  // A refusal or a death first, wherever it is: the ranks it cut off are
  // missing. The dead do not read it.
  int dead = 0;
  std::optional<std::string> failure;
  for (int peer = 0; peer < size; ++peer) {
    const auto& value = entries[static_cast<std::size_t>(peer)];
    const uint32_t mark = value && value->size() >= 6 ? getUint(*value, 0, 4) : 0;
    if (mark == kRefusalMark || mark == kDeathMark) {
      std::size_t at = 4;
      const std::optional<std::string> refuserHost = getText(*value, at);
      if (!refuserHost) {
        throw std::runtime_error("malformed rendezvous entry of rank " + std::to_string(peer));
      }
      const std::string why(value->begin() + static_cast<long>(at), value->end());
      dead += mark == kDeathMark ? 1 : 0;
      if (!failure) {
        failure = "rank " + std::to_string(peer) + " (on " + *refuserHost + ") " +
                  (mark == kDeathMark ? "died: " : "cannot take part: ") + why;
      }
    }
  }
  if (failure) {
    countAndAwaitRefusalReaders(store, prefix, size - dead);
    throw std::runtime_error(*failure);
  }

  GroupRendezvous result;
  result.ranksOnThisHost = 0;
  std::string settingsThatDiffer;
  int ranksThatDiffer = 0;
  struct HostLoad {
    uint32_t ranks = 0;
    uint32_t cores = UINT32_MAX;  // the fewest any of its ranks may use
  };
  std::map<std::string, HostLoad> hostLoads;  // by host identity
  std::map<std::string, int> hostNumbers;     // by host identity, in the order of first ranks
  for (int peer = 0; peer < size; ++peer) {
    if (!entries[static_cast<std::size_t>(peer)]) {
      throw std::runtime_error("the rendezvous table has no entry for rank " + std::to_string(peer));
    }
    std::optional<Entry> entry = parseEntry(*entries[static_cast<std::size_t>(peer)]);
    if (!entry) {
      throw std::runtime_error("malformed rendezvous entry of rank " + std::to_string(peer));
    }
    // Equal strings (the usual case) need no parsing: at n ranks every
    // rank compares n entries.
    if (const auto differences =
            entry->settings == settings ? std::vector<std::string>{} : settingDifferences(settings, entry->settings);
        !differences.empty()) {
      if (++ranksThatDiffer <= 3) {
        settingsThatDiffer += (settingsThatDiffer.empty() ? "" : "; ") + std::string("rank ") + std::to_string(peer) +
                              " has " + differences.front();
        for (std::size_t i = 1; i < differences.size(); ++i) {
          settingsThatDiffer += ", " + differences[i];
        }
      }
    }
    result.hostNames.push_back(std::move(entry->hostName));
    result.networkInterfaces.push_back(std::move(entry->networkInterfaces));
    result.hosts.push_back(hostNumbers.emplace(entry->host, static_cast<int>(hostNumbers.size())).first->second);
    HostLoad& load = hostLoads[entry->host];
    ++load.ranks;
    load.cores = std::min(load.cores, entry->cores);
    result.channels.push_back(entry->channel);
    const bool sameHost = peer == rank || (entry->host == host && !config().peersOnOtherHosts);
    if (sameHost) {
      ++result.ranksOnThisHost;
    }
    result.onOtherHost.push_back(!sameHost);
    const bool watchable = sameHost && !pidNamespace.empty() && entry->pidNamespace == pidNamespace;
    result.processes.push_back(watchable ? entry->process : ProcessIdentity{});
    result.addresses.push_back(std::move(entry->address));
  }
  for (const auto& [hostId, load] : hostLoads) {
    result.ranksOutnumberCores = result.ranksOutnumberCores || load.ranks > load.cores;
  }
  // Every rank reads the whole table, so every rank raises here, before
  // any collective could run on algorithms that the ranks chose differently.
  if (ranksThatDiffer > 0) {
    if (ranksThatDiffer > 3) {
      settingsThatDiffer += "; and " + std::to_string(ranksThatDiffer - 3) + " more rank(s)";
    }
    throw SettingsMismatch(
        "ranks disagree about the settings that choose algorithms, which every rank of a group "
        "must share: " +
        settingsThatDiffer);
  }
  return result;
}

std::string describeUnreachable(const std::vector<int>& ranks, const GroupRendezvous& peers, const std::string& mine) {
  // Ranks of one host that offer the same devices are named together, in
  // the order of their first rank.
  std::vector<std::pair<std::string, std::vector<int>>> byPlace;  // (host + devices, ranks)
  for (int rank : ranks) {
    const auto index = static_cast<std::size_t>(rank);
    const std::string place = peers.hostNames.at(index) + "\n" + peers.networkInterfaces.at(index);
    auto known = std::find_if(byPlace.begin(), byPlace.end(), [&](const auto& entry) { return entry.first == place; });
    if (known == byPlace.end()) {
      byPlace.emplace_back(place, std::vector<int>{rank});
    } else {
      known->second.push_back(rank);
    }
  }
  std::string text = "no network device of this host reaches ";
  for (std::size_t index = 0; index < byPlace.size(); ++index) {
    const std::vector<int>& group = byPlace[index].second;
    const auto first = static_cast<std::size_t>(group.front());
    text += index == 0 ? "" : "; nor ";
    text += group.size() == 1 ? "rank " : "ranks ";
    for (std::size_t at = 0; at < group.size(); ++at) {
      text += (at == 0 ? "" : ", ") + std::to_string(group[at]);
    }
    text += " (on " + peers.hostNames.at(first) + "), which " + (group.size() == 1 ? "offers " : "offer ") +
            peers.networkInterfaces.at(first);
  }
  return text + " (this rank offers " + mine +
         "); choose network devices that connect the hosts with UCXCOLL_NET_DEVICES on every host (a list as "
         "NCCL_SOCKET_IFNAME takes: \"=eth0\", \"eth\", \"^docker,lo\")";
}

GroupRendezvous narrowRendezvous(const GroupRendezvous& peers, const std::vector<int>& ranks,
                                 const std::vector<uint32_t>& channels) {
  GroupRendezvous narrowed;
  narrowed.ranksOnThisHost = 0;
  narrowed.ranksOutnumberCores = peers.ranksOutnumberCores;
  std::map<int, int> hostNumbers;  // parent's number -> new number, in order of each host's first rank
  for (int rank : ranks) {
    const auto r = static_cast<std::size_t>(rank);
    narrowed.addresses.push_back(peers.addresses.at(r));
    narrowed.channels.push_back(channels.at(r));
    narrowed.processes.push_back(r < peers.processes.size() ? peers.processes[r] : ProcessIdentity{});
    const bool otherHost = r < peers.onOtherHost.size() && peers.onOtherHost[r];
    narrowed.onOtherHost.push_back(otherHost);
    narrowed.ranksOnThisHost += otherHost ? 0 : 1;
    narrowed.hostNames.push_back(r < peers.hostNames.size() ? peers.hostNames[r] : std::string());
    narrowed.networkInterfaces.push_back(r < peers.networkInterfaces.size() ? peers.networkInterfaces[r]
                                                                            : std::string());
    const int host = r < peers.hosts.size() ? peers.hosts[r] : 0;
    narrowed.hosts.push_back(hostNumbers.emplace(host, static_cast<int>(hostNumbers.size())).first->second);
  }
  return narrowed;
}

}  // namespace ucxcoll
