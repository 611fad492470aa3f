#pragma once
// Error types shared by the torch-free layers. The backend layer maps them to
// the matching Python exception (see backend/errors.hpp).

#include <stdexcept>
#include <string>

namespace ucxcoll {

// A failure of the transport or of a collective (peer gone, truncated message).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The operation's deadline passed before every peer delivered.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Ranks disagree about a collective (different sizes, dtypes or order).
class MismatchError : public Error {
 public:
  using Error::Error;
};

// The group was shut down or aborted while the operation was pending.
class AbortedError : public Error {
 public:
  using Error::Error;
};

}  // namespace ucxcoll
