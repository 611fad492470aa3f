#pragma once
// How the engine gets its transport: the one place that decides which
// transports a process combines.

#include <memory>
#include <string>

#include "transport/network_devices.hpp"
#include "transport/transport.hpp"

namespace ucxcoll {

// The transport of a real process: UCX for every peer (on the
// `networkDevices` chosen for it, see network_devices.hpp), under
// shared-memory lanes for peers on this host (shared_memory_transport.hpp;
// UCXCOLL_SHARED_MEMORY=0 leaves UCX alone to carry everything).
std::unique_ptr<Transport> makeProcessTransport(const NetworkDevices& networkDevices);

}  // namespace ucxcoll
