#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/file_descriptor.hpp"
#include "common/interface_list.hpp"
#include "transport/network_devices.hpp"
#include "transport/tcp_progress.hpp"

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
  // A TCP interface beside an RDMA port: UCX's rail limits stay its own.
  CHECK(viaStore.rails == 1);

  // The store's host tells nothing (a hostname mapped to 127.0.1.1, an
  // unknown store): everything but loopback and docker ones.
  for (const char* store : {"node1", ""}) {
    INFO(store);
    NetworkDevices blind = choose({.storeHost = store});
    CHECK(blind.ucxValue == "eth0,eth1,veth12,mlx5_0:1");
    CHECK(blind.reason.starts_with("every device but loopback and docker ones"));
    CHECK(blind.rails == 1);  // some of them may reach no peer
  }
}

TEST_CASE("UCXCOLL_NET_DEVICES wins over UCX_NET_DEVICES and the automatic choice", "[network]") {
  JobLocation across{.storeHost = "10.0.0.1"};
  NetworkDevices exact = choose(across, "=eth1", std::string("eth0"));
  CHECK(exact.ucxValue == "eth1");
  CHECK(exact.inUse == "eth1 192.168.100.1");
  CHECK(exact.reason == "UCXCOLL_NET_DEVICES==eth1");
  CHECK(choose(across, "^lo,eth1,veth").ucxValue == "eth0,mlx5_0:1");
  CHECK(exact.rails == 1);
  CHECK(choose(across, "eth").ucxValue == "eth0,eth1");
  // Several listed: a large message may be split across all of them.
  CHECK(choose(across, "eth").rails == 2);
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

TEST_CASE("the addresses of a device list are the literals after each name", "[network]") {
  CHECK(addressesOfDevices("eth0 10.0.0.7, eth2 10.1.0.7, mlx5_0:1") ==
        std::vector<std::string>{"10.0.0.7", "10.1.0.7"});
  CHECK(addressesOfDevices("lo 127.0.0.1") == std::vector<std::string>{"127.0.0.1"});
  CHECK(addressesOfDevices("eth0 fe80::1") == std::vector<std::string>{"fe80::1"});
  CHECK(addressesOfDevices("").empty());
}

TEST_CASE("the bytes moved over this process's TCP connections are counted by peer address", "[network]") {
  // A connection over loopback: what one end sends and the other receives
  // shows up under 127.0.0.1 (counted on both ends, as both are ours).
  // Held in FileDescriptors: a failed REQUIRE leaves the test by an exception.
  const FileDescriptor listener(socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(listener.get() >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  REQUIRE(bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
  REQUIRE(listen(listener.get(), 1) == 0);
  const FileDescriptor client(socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(connect(client.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  const FileDescriptor server(accept(listener.get(), nullptr, nullptr));
  REQUIRE(server.get() >= 0);
  const uint64_t before = tcpBytesByPeerAddress()["127.0.0.1"];
  const std::vector<char> data(1 << 16, 'x');
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t wrote = write(client.get(), data.data() + sent, data.size() - sent);
    REQUIRE(wrote > 0);
    sent += static_cast<std::size_t>(wrote);
  }
  std::vector<char> received(data.size());
  std::size_t got = 0;
  while (got < received.size()) {
    const ssize_t read = ::read(server.get(), received.data() + got, received.size() - got);
    REQUIRE(read > 0);
    got += static_cast<std::size_t>(read);
  }
  const auto after = tcpBytesByPeerAddress();
  REQUIRE(after.count("127.0.0.1") == 1);
  // Acknowledged to the client and received by the server: twice the data
  // at least.
  CHECK(after.at("127.0.0.1") - before >= 2 * data.size());
  CHECK(after.count("192.0.2.1") == 0);  // nothing connects there
}
