#include "backend/group_setup.hpp"

#include <unistd.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <string>

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

}  // namespace

GroupRendezvous rendezvous(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           const std::vector<uint8_t>& myAddress, uint32_t myChannel) {
  // A store can outlive a group (torchrun's agent store survives
  // destroy_process_group + init_process_group), so keys from an earlier
  // incarnation of the same group name may still be there. Every rank bumps
  // a join counter; ranks of the same incarnation get the same quotient.
  int64_t joined = store->add("ucxcoll/joined", 1);
  std::string prefix = "ucxcoll/" + std::to_string((joined - 1) / size) + "/";

  // Value: the channel (4 bytes, little-endian); the host identity, the
  // pid namespace identity, the group-wide settings and the hostname (each
  // a 2-byte length and the bytes; the hostname names a host in errors);
  // the pid (4 bytes), its start time (8) and the cores it may use (4);
  // then the worker address.
  const std::string host = hostIdentity();
  const std::string pidNamespace = pidNamespaceIdentity();
  const std::string settings = groupWideSettings(config());
  const std::string name = hostName();
  const ProcessIdentity me = thisProcess();
  std::vector<uint8_t> mine;
  putUint(mine, myChannel, 4);
  for (const std::string* text : {&host, &pidNamespace, &settings, &name}) {
    putUint(mine, static_cast<uint32_t>(text->size()), 2);
    mine.insert(mine.end(), text->begin(), text->end());
  }
  putUint(mine, static_cast<uint32_t>(me.pid), 4);
  putUint(mine, static_cast<uint32_t>(me.startTime), 4);
  putUint(mine, static_cast<uint32_t>(me.startTime >> 32), 4);
  putUint(mine, static_cast<uint32_t>(usableCores()), 4);
  mine.insert(mine.end(), myAddress.begin(), myAddress.end());
  store->set(prefix + "peer/" + std::to_string(rank), mine);

  GroupRendezvous result;
  result.ranksOnThisHost = 0;
  std::string settingsThatDiffer;
  int ranksThatDiffer = 0;
  struct HostLoad {
    uint32_t ranks = 0;
    uint32_t cores = UINT32_MAX;  // the fewest any of its ranks may use
  };
  std::map<std::string, HostLoad> hostLoads;  // by host identity
  for (int peer = 0; peer < size; ++peer) {
    std::vector<uint8_t> value = peer == rank ? mine : store->get(prefix + "peer/" + std::to_string(peer));
    auto malformed = [&] { return std::runtime_error("malformed rendezvous entry of rank " + std::to_string(peer)); };
    std::size_t at = 4;
    auto text = [&] {
      if (value.size() < at + 2 || value.size() < at + 2 + getUint(value, at, 2)) {
        throw malformed();
      }
      const std::size_t length = getUint(value, at, 2);
      std::string read(value.begin() + static_cast<long>(at + 2), value.begin() + static_cast<long>(at + 2 + length));
      at += 2 + length;
      return read;
    };
    const std::string peerHost = text();
    const std::string peerPidNamespace = text();
    if (const auto differences = settingDifferences(settings, text()); !differences.empty()) {
      if (++ranksThatDiffer <= 3) {
        settingsThatDiffer += (settingsThatDiffer.empty() ? "" : "; ") + std::string("rank ") + std::to_string(peer) +
                              " has " + differences.front();
        for (std::size_t i = 1; i < differences.size(); ++i) {
          settingsThatDiffer += ", " + differences[i];
        }
      }
    }
    result.hostNames.push_back(text());
    if (value.size() < at + 16) {
      throw malformed();
    }
    ProcessIdentity process{static_cast<pid_t>(getUint(value, at, 4)),
                            getUint(value, at + 4, 4) | (uint64_t{getUint(value, at + 8, 4)} << 32)};
    HostLoad& load = hostLoads[peerHost];
    ++load.ranks;
    load.cores = std::min(load.cores, getUint(value, at + 12, 4));
    at += 16;
    result.channels.push_back(getUint(value, 0, 4));
    const bool sameHost = peer == rank || (peerHost == host && !config().peersOnOtherHosts);
    if (sameHost) {
      ++result.ranksOnThisHost;
    }
    result.onOtherHost.push_back(!sameHost);
    const bool watchable = sameHost && !pidNamespace.empty() && peerPidNamespace == pidNamespace;
    result.processes.push_back(watchable ? process : ProcessIdentity{});
    result.addresses.emplace_back(value.begin() + static_cast<long>(at), value.end());
  }
  for (const auto& [host, load] : hostLoads) {
    result.ranksOutnumberCores = result.ranksOutnumberCores || load.ranks > load.cores;
  }
  // Every rank reads every entry, so every rank raises here, before any
  // collective could run on algorithms that the ranks chose differently.
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

namespace {

c10::intrusive_ptr<c10d::Store> unprefixed(const c10::intrusive_ptr<c10d::Store>& store) {
  if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(store.get())) {
    return prefixed->getUnderlyingNonPrefixStore();
  }
  return store;
}

}  // namespace

uint64_t jobKey(const c10::intrusive_ptr<c10d::Store>& store) {
  std::random_device entropy;
  std::vector<uint8_t> proposed(8);
  for (auto& byte : proposed) {
    byte = static_cast<uint8_t>(entropy());
  }
  std::vector<uint8_t> agreed;
  try {
    agreed = unprefixed(store)->compareSet("ucxcoll/job_key", {}, proposed);
  } catch (const c10::Error& error) {
    // A store written in Python without compare_set: no key; tags then
    // guard against nothing but mix-ups within the job.
    UCXCOLL_INFO("the store cannot compare-and-set, so this job's messages carry no job key: "
                 << error.what_without_backtrace());
    return 0;
  }
  if (agreed.size() != 8) {
    throw std::runtime_error("the store's ucxcoll/job_key holds " + std::to_string(agreed.size()) +
                             " bytes, not 8 (written by something else?)");
  }
  uint64_t key = 0;
  for (uint8_t byte : agreed) {
    key = (key << 8) | byte;
  }
  return key;
}

JobLocation jobLocation(const c10::intrusive_ptr<c10d::Store>& store) {
  JobLocation where;
  c10::intrusive_ptr<c10d::Store> base = unprefixed(store);
  if (auto* tcp = dynamic_cast<c10d::TCPStore*>(base.get())) {
    where.storeHost = tcp->getHost();
  } else if (const char* master = std::getenv("MASTER_ADDR")) {
    where.storeHost = master;
  }
  const char* localWorld = std::getenv("LOCAL_WORLD_SIZE");
  const char* world = std::getenv("WORLD_SIZE");
  where.allRanksOnThisHost =
      localWorld != nullptr && world != nullptr && *world != '\0' && std::strcmp(localWorld, world) == 0;
  return where;
}

}  // namespace ucxcoll
