#include "common/logging.hpp"

#include <unistd.h>

#include <iostream>
#include <mutex>

#include "common/config.hpp"

namespace ucxcoll {

LogLevel logLevel() {
  return config().logLevel;
}

void logMessage(LogLevel level, const std::string& message) {
  static std::mutex mutex;
  static const char* names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  std::lock_guard<std::mutex> lock(mutex);
  std::cerr << "[ucxcoll " << names[static_cast<int>(level)] << " pid " << getpid() << "] " << message << std::endl;
}

}  // namespace ucxcoll
