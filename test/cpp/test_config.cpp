#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "common/config.hpp"

using namespace ucxcoll;

namespace {

Config parse(const std::map<std::string, std::string>& environment) {
  return parseConfig([&](const char* name) -> const char* {
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  });
}

}  // namespace

TEST_CASE("an empty environment gives the defaults and no problem", "[config]") {
  Config c = parse({});
  CHECK(c.problems.empty());
  CHECK(c.logLevel == LogLevel::Warn);
  CHECK(c.spinMicroseconds == 250);
  CHECK_FALSE(c.spinMicrosecondsSet);
  CHECK(c.smallMessageBytes == 32 * 1024);
  CHECK(c.stagingMinBytes == 256 * 1024);
  CHECK(c.allreduceAlgorithm == "auto");
  CHECK(c.exitGraceMilliseconds == 2000);
  CHECK(c.sharedMemory);
  CHECK_FALSE(c.peersOnOtherHosts);
  CHECK(c.peerLivenessMilliseconds == 2000);
  CHECK(c.connect == "auto");
  // An empty value counts as unset.
  CHECK(parse({{"UCXCOLL_SPIN_US", ""}}).problems.empty());
}

TEST_CASE("valid settings are taken, at the ends of their ranges too", "[config]") {
  Config c = parse({{"UCXCOLL_LOG_LEVEL", "debug"},
                    {"UCXCOLL_SPIN_US", "1000000"},
                    {"UCXCOLL_SMALL_MSG_BYTES", "0"},
                    {"UCXCOLL_STAGING_MIN_BYTES", "1073741824"},
                    {"UCXCOLL_ALLGATHER_ALGO", "ring"},
                    {"UCXCOLL_ALLREDUCE_ALGO", "direct"},
                    {"UCXCOLL_BCAST_ALGO", "binomial"},
                    {"UCXCOLL_ALLTOALL_ALGO", "staged"},
                    {"UCXCOLL_REDUCE_SCATTER_ALGO", "ring"},
                    {"UCXCOLL_REDUCE_ALGO", "hierarchical"},
                    {"UCXCOLL_EXIT_GRACE_MS", "0"},
                    {"UCXCOLL_SHARED_MEMORY", "0"},
                    {"UCXCOLL_PEERS_ON_OTHER_HOSTS", "1"},
                    {"UCXCOLL_PEER_LIVENESS_MS", "100"},
                    {"UCXCOLL_CONNECT", "lazy"}});
  CHECK(c.problems.empty());
  CHECK(c.logLevel == LogLevel::Debug);
  CHECK(c.spinMicroseconds == 1000000);
  CHECK(c.spinMicrosecondsSet);
  CHECK(c.smallMessageBytes == 0);
  CHECK(c.stagingMinBytes == std::size_t{1} << 30);
  CHECK(c.allgatherAlgorithm == "ring");
  CHECK(c.allreduceAlgorithm == "direct");
  CHECK(c.alltoallAlgorithm == "staged");
  CHECK(c.reduceAlgorithm == "hierarchical");
  CHECK(c.reduceScatterAlgorithm == "ring");
  CHECK(c.exitGraceMilliseconds == 0);
  CHECK_FALSE(c.sharedMemory);
  CHECK(c.peersOnOtherHosts);
  CHECK(c.peerLivenessMilliseconds == 100);
  CHECK(c.connect == "lazy");
  CHECK(parse({{"UCXCOLL_CONNECT", "eager"}}).connect == "eager");
}

TEST_CASE("each bad value is named with what the variable takes, and keeps the default", "[config]") {
  struct Case {
    const char* name;
    const char* value;
    const char* problem;
  };
  const Case cases[] = {
      {"UCXCOLL_SPIN_US", "-1", "UCXCOLL_SPIN_US=-1: expected an integer from 0 to 1000000 (microseconds)"},
      {"UCXCOLL_SPIN_US", "1000001", "UCXCOLL_SPIN_US=1000001: expected an integer from 0 to 1000000 (microseconds)"},
      // Would wrap to a negative int if taken as it was before.
      {"UCXCOLL_SPIN_US", "4294967296",
       "UCXCOLL_SPIN_US=4294967296: expected an integer from 0 to 1000000 (microseconds)"},
      {"UCXCOLL_SPIN_US", "99999999999999999999999",
       "UCXCOLL_SPIN_US=99999999999999999999999: expected an integer from 0 to 1000000 (microseconds)"},
      {"UCXCOLL_SPIN_US", "50us", "UCXCOLL_SPIN_US=50us: expected an integer from 0 to 1000000 (microseconds)"},
      {"UCXCOLL_SMALL_MSG_BYTES", "1e6",
       "UCXCOLL_SMALL_MSG_BYTES=1e6: expected an integer from 0 to 1073741824 (bytes)"},
      {"UCXCOLL_STAGING_MIN_BYTES", "-1",
       "UCXCOLL_STAGING_MIN_BYTES=-1: expected an integer from 0 to 1073741824 (bytes)"},
      {"UCXCOLL_STAGING_MIN_BYTES", "1073741825",
       "UCXCOLL_STAGING_MIN_BYTES=1073741825: expected an integer from 0 to 1073741824 (bytes)"},
      {"UCXCOLL_EXIT_GRACE_MS", "2s", "UCXCOLL_EXIT_GRACE_MS=2s: expected an integer from 0 to 3600000 (milliseconds)"},
      {"UCXCOLL_SHARED_MEMORY", "yes", "UCXCOLL_SHARED_MEMORY=yes: expected an integer from 0 to 1"},
      {"UCXCOLL_SHARED_MEMORY", "2", "UCXCOLL_SHARED_MEMORY=2: expected an integer from 0 to 1"},
      {"UCXCOLL_PEERS_ON_OTHER_HOSTS", "on", "UCXCOLL_PEERS_ON_OTHER_HOSTS=on: expected an integer from 0 to 1"},
      {"UCXCOLL_PEER_LIVENESS_MS", "99",
       "UCXCOLL_PEER_LIVENESS_MS=99: expected an integer from 100 to 3600000 (milliseconds)"},
      {"UCXCOLL_PEER_LIVENESS_MS", "2s",
       "UCXCOLL_PEER_LIVENESS_MS=2s: expected an integer from 100 to 3600000 (milliseconds)"},
      {"UCXCOLL_CONNECT", "on_demand", "UCXCOLL_CONNECT=on_demand: expected one of auto, eager, lazy"},
      {"UCXCOLL_LOG_LEVEL", "verbose", "UCXCOLL_LOG_LEVEL=verbose: expected one of error, warn, info, debug"},
      {"UCXCOLL_LOG_LEVEL", "WARN", "UCXCOLL_LOG_LEVEL=WARN: expected one of error, warn, info, debug"},
      {"UCXCOLL_ALLGATHER_ALGO", "tree",
       "UCXCOLL_ALLGATHER_ALGO=tree: expected one of auto, hierarchical, direct, chunked, ring"},
      {"UCXCOLL_ALLREDUCE_ALGO", "rabenseifner",
       "UCXCOLL_ALLREDUCE_ALGO=rabenseifner: expected one of auto, hierarchical, recursive_doubling, direct, ring"},
      {"UCXCOLL_BCAST_ALGO", "ring",
       "UCXCOLL_BCAST_ALGO=ring: expected one of auto, hierarchical, pipelined, binomial"},
      {"UCXCOLL_ALLTOALL_ALGO", "ring",
       "UCXCOLL_ALLTOALL_ALGO=ring: expected one of auto, hierarchical, staged, pairwise"},
      {"UCXCOLL_REDUCE_SCATTER_ALGO", "staged",
       "UCXCOLL_REDUCE_SCATTER_ALGO=staged: expected one of auto, hierarchical, ring, pairwise"},
      {"UCXCOLL_REDUCE_ALGO", "tree", "UCXCOLL_REDUCE_ALGO=tree: expected one of auto, hierarchical, direct"},
  };
  const Config defaults = parse({});
  for (const Case& bad : cases) {
    INFO(bad.name << "=" << bad.value);
    Config c = parse({{bad.name, bad.value}});
    REQUIRE(c.problems.size() == 1);
    CHECK(c.problems[0] == bad.problem);
    CHECK(c.spinMicroseconds == defaults.spinMicroseconds);
    CHECK(c.smallMessageBytes == defaults.smallMessageBytes);
    CHECK(c.stagingMinBytes == defaults.stagingMinBytes);
    CHECK(c.exitGraceMilliseconds == defaults.exitGraceMilliseconds);
    CHECK(c.sharedMemory == defaults.sharedMemory);
    CHECK(c.logLevel == defaults.logLevel);
    CHECK(c.allreduceAlgorithm == defaults.allreduceAlgorithm);
    CHECK(c.connect == defaults.connect);
  }
}

TEST_CASE("every bad variable is reported, not only the first", "[config]") {
  Config c = parse({{"UCXCOLL_SPIN_US", "x"}, {"UCXCOLL_LOG_LEVEL", "loud"}, {"UCXCOLL_SHARED_MEMORY", "1"}});
  REQUIRE(c.problems.size() == 2);
  CHECK(c.problems[0] == "UCXCOLL_LOG_LEVEL=loud: expected one of error, warn, info, debug");
  CHECK(c.problems[1] == "UCXCOLL_SPIN_US=x: expected an integer from 0 to 1000000 (microseconds)");
}

TEST_CASE("the group-wide settings name every algorithm choice, and differences are named both ways", "[config]") {
  const std::string defaults = groupWideSettings(parse({}));
  CHECK(defaults ==
        "UCXCOLL_SMALL_MSG_BYTES=32768 UCXCOLL_STAGING_MIN_BYTES=262144 UCXCOLL_ALLGATHER_ALGO=auto "
        "UCXCOLL_ALLREDUCE_ALGO=auto UCXCOLL_BCAST_ALGO=auto UCXCOLL_ALLTOALL_ALGO=auto "
        "UCXCOLL_REDUCE_SCATTER_ALGO=auto UCXCOLL_REDUCE_ALGO=auto");
  // Settings that leave algorithms alone may differ between ranks.
  CHECK(groupWideSettings(parse({{"UCXCOLL_SPIN_US", "0"}, {"UCXCOLL_SHARED_MEMORY", "0"}})) == defaults);
  CHECK(settingDifferences(defaults, defaults).empty());
  const std::string other =
      groupWideSettings(parse({{"UCXCOLL_STAGING_MIN_BYTES", "1024"}, {"UCXCOLL_BCAST_ALGO", "pipelined"}}));
  CHECK(settingDifferences(defaults, other) ==
        std::vector<std::string>{"UCXCOLL_BCAST_ALGO=pipelined where this rank has auto",
                                 "UCXCOLL_STAGING_MIN_BYTES=1024 where this rank has 262144"});
  CHECK(settingDifferences(other, defaults) ==
        std::vector<std::string>{"UCXCOLL_BCAST_ALGO=auto where this rank has pipelined",
                                 "UCXCOLL_STAGING_MIN_BYTES=262144 where this rank has 1024"});
  // A peer whose entry lacks a setting (or has one this rank lacks).
  CHECK(settingDifferences("A=1 B=2", "A=1") == std::vector<std::string>{"B=unset where this rank has 2"});
  CHECK(settingDifferences("", "C=3") == std::vector<std::string>{"C=3 where this rank has unset"});
}
