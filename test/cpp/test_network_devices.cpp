#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "common/interface_list.hpp"
#include "transport/network_devices.hpp"

using namespace ucxcoll;

namespace {

// A host with a loopback, its link, an interface that reaches nobody, a
// docker bridge (left out: a bridge), a veth of a container and one RDMA port.
HostNetwork typicalHost() {
  HostNetwork host;
  host.interfaces = {{"lo", "127.0.0.1"}, {"eth0", "10.0.0.7"}, {"eth1", "192.168.100.1"}, {"veth12", "172.18.0.1"}};
  host.bridges = {"docker0"};
  host.rdmaPorts = {"mlx5_0:1"};
  host.interfaceReaching = [](const std::string& name) {
    return name == "10.0.0.1" ? "eth0" : name == "127.0.1.1" || name == "node1" ? "lo" : "";
  };
  return host;
}

NetworkDevices choose(const JobLocation& where, const std::string& setting = "",
                      const std::optional<std::string>& ucxSetting = std::nullopt) {
  return chooseNetworkDevices(where, setting, ucxSetting, typicalHost());
}

}  // namespace

TEST_CASE("interface lists are read as NCCL_SOCKET_IFNAME reads them", "[network]") {
  auto prefixes = parseInterfaceList("eth,ib");
  REQUIRE(prefixes);
  CHECK(prefixes->matches("eth0"));
  CHECK(prefixes->matches("ib1"));
  CHECK_FALSE(prefixes->matches("lo"));
  CHECK_FALSE(prefixes->matches("veth0"));  // prefixes, not substrings

  auto exact = parseInterfaceList("=eth0");
  REQUIRE(exact);
  CHECK(exact->matches("eth0"));
  CHECK_FALSE(exact->matches("eth01"));

  auto excluded = parseInterfaceList("^docker,lo");
  REQUIRE(excluded);
  CHECK(excluded->matches("eth0"));
  CHECK_FALSE(excluded->matches("docker0"));
  CHECK_FALSE(excluded->matches("lo"));

  auto excludedExactly = parseInterfaceList("^=eth1");
  REQUIRE(excludedExactly);
  CHECK(excludedExactly->matches("eth10"));
  CHECK_FALSE(excludedExactly->matches("eth1"));

  for (const char* malformed : {"", "^", "=", "^=", "eth0,", ",eth0", "eth0,,lo", "eth 0", "=^eth0", "eth0,^lo"}) {
    INFO(malformed);
    CHECK_FALSE(parseInterfaceList(malformed));
  }
}

TEST_CASE("UCX_NET_DEVICES is read in UCX's own syntax", "[network]") {
  CHECK(parseUcxDeviceList("all").matches("anything"));
  CHECK(parseUcxDeviceList("eth0,mlx5_0:1").matches("mlx5_0:1"));
  CHECK_FALSE(parseUcxDeviceList("eth0").matches("eth01"));  // exact names only
  CHECK_FALSE(parseUcxDeviceList("^eth1").matches("eth1"));
  CHECK(parseUcxDeviceList("^eth1").matches("eth0"));
}

TEST_CASE("the automatic choice follows where the job runs", "[network]") {
  JobLocation oneHost{.storeHost = "10.0.0.1", .allRanksOnThisHost = true};
  CHECK(choose(oneHost).ucxValue == "lo");
  CHECK(choose({.storeHost = "localhost"}).ucxValue == "lo");

  // The store is reached through eth0: eth0 and the RDMA port, nothing that
  // reaches no peer.
  NetworkDevices viaStore = choose({.storeHost = "10.0.0.1"});
  CHECK(viaStore.ucxValue == "eth0,mlx5_0:1");
  CHECK(viaStore.inUse == "eth0 10.0.0.7, mlx5_0:1");
  CHECK(viaStore.reason.starts_with("the interface that reaches the store's host 10.0.0.1"));

  // The store's host tells nothing (a hostname mapped to 127.0.1.1, an
  // unknown store): everything but loopback and docker ones.
  for (const char* store : {"node1", ""}) {
    INFO(store);
    NetworkDevices blind = choose({.storeHost = store});
    CHECK(blind.ucxValue == "eth0,eth1,veth12,mlx5_0:1");
    CHECK(blind.reason.starts_with("every device but loopback and docker ones"));
  }
}

TEST_CASE("UCXCOLL_NET_DEVICES wins over UCX_NET_DEVICES and the automatic choice", "[network]") {
  JobLocation across{.storeHost = "10.0.0.1"};
  NetworkDevices exact = choose(across, "=eth1", std::string("eth0"));
  CHECK(exact.ucxValue == "eth1");
  CHECK(exact.inUse == "eth1 192.168.100.1");
  CHECK(exact.reason == "UCXCOLL_NET_DEVICES==eth1");
  CHECK(choose(across, "^lo,eth1,veth").ucxValue == "eth0,mlx5_0:1");
  CHECK(choose(across, "eth").ucxValue == "eth0,eth1");
  CHECK(choose(across, "mlx5").inUse == "mlx5_0:1");
  // Even where every rank is on this host: the user chose.
  CHECK(choose({.storeHost = "localhost", .allRanksOnThisHost = true}, "=eth0").ucxValue == "eth0");
}

TEST_CASE("the user's UCX_NET_DEVICES is left to UCX and reported", "[network]") {
  NetworkDevices user = choose({.storeHost = "10.0.0.1"}, "", std::string("eth1,nosuch"));
  CHECK(user.ucxValue.empty());  // UCX reads it itself
  CHECK(user.inUse == "eth1 192.168.100.1");
  CHECK(choose({}, "", std::string("all")).inUse ==
        "lo 127.0.0.1, eth0 10.0.0.7, eth1 192.168.100.1, "
        "veth12 172.18.0.1, mlx5_0:1");
}

TEST_CASE("settings that select nothing this host has raise, listing what it has", "[network]") {
  const std::string has =
      "(this host has lo, eth0, eth1, veth12, mlx5_0:1; UCX leaves out the bridge docker0 unless "
      "UCX_TCP_BRIDGE_ENABLE=y)";
  CHECK_THROWS_WITH(choose({}, "=eth0,eth9"),
                    "UCXCOLL_NET_DEVICES==eth0,eth9 names eth9, which is not a network "
                    "device of this host that is up and has an address " +
                        has);
  CHECK_THROWS_WITH(choose({}, "=docker0"),
                    "UCXCOLL_NET_DEVICES==docker0 names docker0, which is not a network "
                    "device of this host that is up and has an address " +
                        has);
  CHECK_THROWS_WITH(choose({}, "wlan"),
                    "UCXCOLL_NET_DEVICES=wlan selects none of this host's network devices that are up and have an "
                    "address " +
                        has);
  CHECK_THROWS_WITH(choose({}, "^l,e,v,m"), Catch::Matchers::StartsWith("UCXCOLL_NET_DEVICES=^l,e,v,m selects none"));
  CHECK_THROWS_WITH(choose({}, "", std::string("nosuch0")),
                    "UCX_NET_DEVICES=nosuch0 selects none of this host's network devices that are up and have an "
                    "address " +
                        has);
  CHECK_THROWS_AS(choose({}, "", std::string("nosuch0")), std::invalid_argument);
  // Exclusions may name what is not there, as NCCL's may.
  CHECK(choose({}, "^=nosuch0").ucxValue == "lo,eth0,eth1,veth12,mlx5_0:1");
}
