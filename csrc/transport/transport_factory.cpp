#include "transport/transport_factory.hpp"

#include "transport/shared_memory_transport.hpp"
#include "transport/ucx_transport.hpp"

namespace ucxcoll {

std::unique_ptr<Transport> makeProcessTransport(const NetworkDevices& networkDevices) {
  // Always wrapped, lanes or not, so that every process's address has the
  // same shape whatever its own UCXCOLL_SHARED_MEMORY says.
  return std::make_unique<SharedMemoryTransport>(std::make_unique<UcxTransport>(networkDevices));
}

}  // namespace ucxcoll
