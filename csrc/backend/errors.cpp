#include "backend/errors.hpp"

#include <c10/util/Exception.h>

#include <stdexcept>

#include "common/error.hpp"

namespace ucxcoll {

std::exception_ptr backendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

std::exception_ptr toTorchError(std::exception_ptr error) {
  if (!error) {
    return nullptr;
  }
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error&) {
    return error;  // already torch's (e.g. a check on the caller's input)
  } catch (const std::invalid_argument& invalid) {
    try {
      C10_THROW_ERROR(ValueError, std::string("ucxcoll: ") + invalid.what());
    } catch (...) {
      return std::current_exception();
    }
  } catch (const std::exception& failed) {
    return backendError(std::string("ucxcoll: ") + failed.what());
  } catch (...) {
    return backendError("ucxcoll: unknown error");
  }
}

}  // namespace ucxcoll
