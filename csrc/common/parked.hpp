#pragma once
// Objects left alive until the process exits, on purpose: an engine that is
// destroyed while UCX may still write into its operations' buffers (a peer
// never took a message) keeps its transport and those operations, because
// tearing UCX down under pending requests only moves the damage elsewhere.
//
// They stay reachable from here, so a leak checker (LeakSanitizer) knows
// them from real leaks, and they are never destroyed: not even by static
// destructors at exit, which run while UCX's progress may still be going.

#include <memory>

namespace ucxcoll {

void parkUntilExit(std::shared_ptr<void> object);

template <typename T>
void parkUntilExit(std::unique_ptr<T> object) {
  parkUntilExit(std::shared_ptr<void>(std::move(object)));
}

}  // namespace ucxcoll
