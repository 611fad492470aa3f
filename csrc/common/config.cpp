#include "common/config.hpp"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/interface_list.hpp"

namespace ucxcoll {
namespace {

// Reads the variables through `lookup`, keeping the default of each value
// that is not valid and noting what is wrong with it.
class Reader {
 public:
  Reader(const EnvironmentLookup& lookup, std::vector<std::string>& problems) : lookup_(lookup), problems_(problems) {}

  const char* get(const char* name) const {
    const char* value = lookup_(name);
    return (value != nullptr && *value != '\0') ? value : nullptr;
  }

  long integer(const char* name, long fallback, long low, long high, const char* unit) {
    const char* value = get(name);
    if (value == nullptr) {
      return fallback;
    }
    errno = 0;
    char* end = nullptr;
    const long parsed = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || errno == ERANGE || parsed < low || parsed > high) {
      problems_.push_back(std::string(name) + "=" + value + ": expected an integer from " + std::to_string(low) +
                          " to " + std::to_string(high) + unit);
      return fallback;
    }
    return parsed;
  }

  std::string choice(const char* name, const std::string& fallback, std::initializer_list<const char*> choices) {
    const char* value = get(name);
    if (value == nullptr) {
      return fallback;
    }
    std::string list;
    for (const char* choice : choices) {
      if (std::string(value) == choice) {
        return value;
      }
      list += (list.empty() ? "" : ", ") + std::string(choice);
    }
    problems_.push_back(std::string(name) + "=" + value + ": expected one of " + list);
    return fallback;
  }

 private:
  const EnvironmentLookup& lookup_;
  std::vector<std::string>& problems_;
};

LogLevel toLogLevel(const std::string& name) {
  if (name == "error") {
    return LogLevel::Error;
  }
  if (name == "info") {
    return LogLevel::Info;
  }
  if (name == "debug") {
    return LogLevel::Debug;
  }
  return LogLevel::Warn;
}

}  // namespace

Config parseConfig(const EnvironmentLookup& lookup) {
  Config c;
  Reader read(lookup, c.problems);
  c.logLevel = toLogLevel(read.choice("UCXCOLL_LOG_LEVEL", "warn", {"error", "warn", "info", "debug"}));
  c.spinMicroseconds =
      static_cast<int>(read.integer("UCXCOLL_SPIN_US", c.spinMicroseconds, 0, kMaxSpinMicroseconds, " (microseconds)"));
  c.spinMicrosecondsSet = read.get("UCXCOLL_SPIN_US") != nullptr;
  c.smallMessageBytes = static_cast<std::size_t>(read.integer(
      "UCXCOLL_SMALL_MSG_BYTES", static_cast<long>(c.smallMessageBytes), 0, kMaxSmallMessageBytes, " (bytes)"));
  c.stagingMinBytes = static_cast<std::size_t>(read.integer(
      "UCXCOLL_STAGING_MIN_BYTES", static_cast<long>(c.stagingMinBytes), 0, kMaxSmallMessageBytes, " (bytes)"));
  c.allgatherAlgorithm = read.choice("UCXCOLL_ALLGATHER_ALGO", c.allgatherAlgorithm,
                                     {"auto", "hierarchical", "direct", "chunked", "ring"});
  c.allreduceAlgorithm = read.choice("UCXCOLL_ALLREDUCE_ALGO", c.allreduceAlgorithm,
                                     {"auto", "hierarchical", "recursive_doubling", "direct", "ring"});
  c.broadcastAlgorithm =
      read.choice("UCXCOLL_BCAST_ALGO", c.broadcastAlgorithm, {"auto", "hierarchical", "pipelined", "binomial"});
  c.alltoallAlgorithm =
      read.choice("UCXCOLL_ALLTOALL_ALGO", c.alltoallAlgorithm, {"auto", "hierarchical", "staged", "pairwise"});
  c.reduceScatterAlgorithm = read.choice("UCXCOLL_REDUCE_SCATTER_ALGO", c.reduceScatterAlgorithm,
                                         {"auto", "hierarchical", "ring", "pairwise"});
  c.reduceAlgorithm = read.choice("UCXCOLL_REDUCE_ALGO", c.reduceAlgorithm, {"auto", "hierarchical", "direct"});
  c.exitGraceMilliseconds = static_cast<int>(
      read.integer("UCXCOLL_EXIT_GRACE_MS", c.exitGraceMilliseconds, 0, kMaxExitGraceMilliseconds, " (milliseconds)"));
  c.sharedMemory = read.integer("UCXCOLL_SHARED_MEMORY", 1, 0, 1, "") != 0;
  c.peersOnOtherHosts = read.integer("UCXCOLL_PEERS_ON_OTHER_HOSTS", 0, 0, 1, "") != 0;
  c.peerLivenessMilliseconds =
      read.integer("UCXCOLL_PEER_LIVENESS_MS", c.peerLivenessMilliseconds, kMinPeerLivenessMilliseconds,
                   kMaxPeerLivenessMilliseconds, " (milliseconds)");
  c.connect = read.choice("UCXCOLL_CONNECT", c.connect, {"auto", "eager", "lazy"});
  if (const char* devices = read.get("UCXCOLL_NET_DEVICES")) {
    if (parseInterfaceList(devices)) {
      c.networkDevices = devices;
    } else {
      c.problems.push_back(std::string("UCXCOLL_NET_DEVICES=") + devices +
                           ": expected interface names or prefixes separated by commas, optionally after ^ (all "
                           "but these) and = (exact names), as in eth0,eth1 or ^docker,lo or =eth0");
    }
  }
  return c;
}

std::string groupWideSettings(const Config& c) {
  return "UCXCOLL_SMALL_MSG_BYTES=" + std::to_string(c.smallMessageBytes) +
         " UCXCOLL_STAGING_MIN_BYTES=" + std::to_string(c.stagingMinBytes) +
         " UCXCOLL_ALLGATHER_ALGO=" + c.allgatherAlgorithm + " UCXCOLL_ALLREDUCE_ALGO=" + c.allreduceAlgorithm +
         " UCXCOLL_BCAST_ALGO=" + c.broadcastAlgorithm + " UCXCOLL_ALLTOALL_ALGO=" + c.alltoallAlgorithm +
         " UCXCOLL_REDUCE_SCATTER_ALGO=" + c.reduceScatterAlgorithm + " UCXCOLL_REDUCE_ALGO=" + c.reduceAlgorithm;
}

namespace {

std::map<std::string, std::string> settingItems(const std::string& settings) {
  std::map<std::string, std::string> items;
  std::istringstream words(settings);
  std::string word;
  while (words >> word) {
    const auto equals = word.find('=');
    items[word.substr(0, equals)] = equals == std::string::npos ? "" : word.substr(equals + 1);
  }
  return items;
}

}  // namespace

std::vector<std::string> settingDifferences(const std::string& mine, const std::string& theirs) {
  const auto myItems = settingItems(mine);
  const auto theirItems = settingItems(theirs);
  auto valueIn = [](const std::map<std::string, std::string>& items, const std::string& name) {
    auto found = items.find(name);
    return found == items.end() ? std::string("unset") : found->second;
  };
  std::set<std::string> names;
  for (const auto* items : {&myItems, &theirItems}) {
    for (const auto& [name, value] : *items) {
      names.insert(name);
    }
  }
  std::vector<std::string> differences;
  for (const std::string& name : names) {
    const std::string ours = valueIn(myItems, name);
    const std::string others = valueIn(theirItems, name);
    if (ours != others) {
      differences.push_back(name + "=" + others + " where this rank has " + ours);
    }
  }
  return differences;
}

const Config& config() {
  static const Config parsed = parseConfig([](const char* name) { return std::getenv(name); });
  return parsed;
}

void validateConfig() {
  const Config& c = config();
  if (c.problems.empty()) {
    return;
  }
  std::string message = c.problems.size() == 1 ? "invalid setting: " : "invalid settings: ";
  for (std::size_t i = 0; i < c.problems.size(); ++i) {
    message += (i ? "; " : "") + c.problems[i];
  }
  throw std::invalid_argument(message);
}

}  // namespace ucxcoll
