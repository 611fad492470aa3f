#pragma once
// FNV-1a, 64 bits: a fingerprint of a name or a list that ranks compute
// alike (not a defence against anyone choosing inputs).

#include <cstddef>
#include <cstdint>

namespace ucxcoll {

inline uint64_t fnv1a(const void* data, std::size_t bytes, uint64_t hash = 1469598103934665603ull) {
  const auto* byte = static_cast<const uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    hash = (hash ^ byte[i]) * 1099511628211ull;
  }
  return hash;
}

}  // namespace ucxcoll
