#pragma once
// How many cores this process may run on: its affinity mask, which is
// what a container, taskset or a launcher's binding grants (not the
// machine's count). At least 1.

#include <sched.h>

#include <algorithm>

namespace ucxcoll {

inline int usableCores() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? std::max(1, CPU_COUNT(&cpus)) : 1;
}

}  // namespace ucxcoll
