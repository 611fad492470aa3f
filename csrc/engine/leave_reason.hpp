#pragma once
// How a rank left a group, as its peers are told (tag::kLeftNotice plus
// the reason): the user's own call, so that the peers' errors can name it.

#include <cstdint>

namespace ucxcoll {

enum class LeaveReason : uint32_t {
  ShutDown = 0,      // shutdown(), which destroy_process_group calls
  Aborted = 1,       // abort()
  Released = 2,      // the last reference to the backend went away
  Reconfigured = 3,  // replaced by a reconfigured or shrunk group
};

constexpr const char* describeLeaving(LeaveReason reason) {
  switch (reason) {
    case LeaveReason::ShutDown:
      return "shut its group down (shutdown() or destroy_process_group())";
    case LeaveReason::Aborted:
      return "aborted its group (abort())";
    case LeaveReason::Released:
      return "dropped its last reference to the group";
    case LeaveReason::Reconfigured:
      return "left it for a reconfigured or shrunk group";
  }
  return "left the group";
}

}  // namespace ucxcoll
