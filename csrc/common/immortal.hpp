#pragma once
// A process-wide object made on first use and never destroyed.
//
// Why not a plain function-local static: its first use registers its
// destructor with __cxa_atexit, which takes glibc's exit-functions lock. A
// first use on one of our threads (a staging segment mapped on the
// progress thread, in the middle of a collective) while the main thread
// forks (a DataLoader worker) leaves that lock held in the child for good:
// the child's next static with a destructor (torch registers some on first
// use of a function) then waits forever. Seen in test_scenarios'
// fork_child. Objects here register nothing; they live until the process
// ends, reachable, so leak checkers do not count them.

#include <cstddef>
#include <memory>

namespace ucxcoll {

template <typename T>
T& immortal() {
  alignas(T) static std::byte storage[sizeof(T)];
  static T* const instance = std::construct_at(reinterpret_cast<T*>(storage));
  return *instance;
}

}  // namespace ucxcoll
