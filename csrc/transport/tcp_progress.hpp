#pragma once
// Whether bytes still move over the TCP connections to a host.
//
// Why: the liveness question (engine/liveness.cpp) travels over the same
// connection as the data. On a slow link its answer can wait behind tens of
// MiB of a large collective's data, longer than the time the question
// allows, and a rank that is alive and busy would be named unreachable. A
// link that moves bytes (acknowledged by the peer's kernel, or received
// from it) is not cut, and the host behind it is up: the kernel says so
// for every TCP socket of this process (TCP_INFO), whoever opened it.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ucxcoll {

// For each peer address (an IPv4 or IPv6 literal) this process has TCP
// sockets connected to: the bytes acknowledged by it and received from it
// over all of them, summed. One pass over /proc/self/fd.
std::map<std::string, uint64_t> tcpBytesByPeerAddress();

// The addresses in a device list as the rendezvous carries it ("eth0
// 10.0.0.7, eth2 10.1.0.7, mlx5_0:1"): the literals after each name.
std::vector<std::string> addressesOfDevices(const std::string& devices);

}  // namespace ucxcoll
