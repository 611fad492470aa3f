#pragma once
// How ucxcoll's errors reach Python: the torch-free layers throw
// ucxcoll::Error and its kinds (common/error.hpp); the backend turns them
// into torch.distributed.DistBackendError with a "ucxcoll: " prefix. Input
// errors are raised before anything is sent, directly as the Python
// exception a user expects (ValueError, TypeError, NotImplementedError, see
// tensor_checks.hpp).

#include <exception>
#include <string>

namespace ucxcoll {

// A DistBackendError carrying `message`.
std::exception_ptr backendError(const std::string& message);

// The exception Python should see for `error` (null stays null).
std::exception_ptr toTorchError(std::exception_ptr error);

}  // namespace ucxcoll
