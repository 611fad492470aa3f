#include "common/parked.hpp"

#include <cstddef>
#include <mutex>
#include <vector>

namespace ucxcoll {
namespace {

struct Parked {
  std::mutex mutex;
  std::vector<std::shared_ptr<void>> objects;
};

// Constructed in static storage and never destroyed (see parked.hpp).
Parked& parked() {
  alignas(Parked) static std::byte storage[sizeof(Parked)];
  static Parked* instance = std::construct_at(reinterpret_cast<Parked*>(storage));
  return *instance;
}

}  // namespace

void parkUntilExit(std::shared_ptr<void> object) {
  Parked& place = parked();
  std::lock_guard<std::mutex> lock(place.mutex);
  place.objects.push_back(std::move(object));
}

}  // namespace ucxcoll
