#include "common/parked.hpp"

#include <cstddef>
#include <mutex>
#include <vector>

#include "common/immortal.hpp"

namespace ucxcoll {
namespace {

struct Parked {
  std::mutex mutex;
  std::vector<std::shared_ptr<void>> objects;
};

// Never destroyed (see parked.hpp).
Parked& parked() {
  return immortal<Parked>();
}

}  // namespace

void parkUntilExit(std::shared_ptr<void> object) {
  Parked& place = parked();
  std::lock_guard<std::mutex> lock(place.mutex);
  place.objects.push_back(std::move(object));
}

}  // namespace ucxcoll
