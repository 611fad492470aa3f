#include "common/config.hpp"

#include <cstdlib>
#include <iostream>
#include <stdexcept>

namespace ucxcoll {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

long envInteger(const char* name, long fallback) {
  const char* value = env(name);
  if (value == nullptr) {
    return fallback;
  }
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || parsed < 0) {
    std::cerr << "[ucxcoll] ignoring " << name << "=" << value << ": expected a non-negative integer\n";
    return fallback;
  }
  return parsed;
}

std::string envString(const char* name, const std::string& fallback) {
  const char* value = env(name);
  return value == nullptr ? fallback : std::string(value);
}

LogLevel parseLogLevel(const std::string& text) {
  if (text == "error")
    return LogLevel::Error;
  if (text == "info")
    return LogLevel::Info;
  if (text == "debug")
    return LogLevel::Debug;
  return LogLevel::Warn;
}

Config readConfig() {
  Config c;
  c.logLevel = parseLogLevel(envString("UCXCOLL_LOG_LEVEL", "warn"));
  c.spinMicroseconds = static_cast<int>(envInteger("UCXCOLL_SPIN_US", c.spinMicroseconds));
  c.spinMicrosecondsSet = env("UCXCOLL_SPIN_US") != nullptr;
  c.smallMessageBytes =
      static_cast<std::size_t>(envInteger("UCXCOLL_SMALL_MSG_BYTES", static_cast<long>(c.smallMessageBytes)));
  c.allgatherAlgorithm = envString("UCXCOLL_ALLGATHER_ALGO", c.allgatherAlgorithm);
  c.allreduceAlgorithm = envString("UCXCOLL_ALLREDUCE_ALGO", c.allreduceAlgorithm);
  c.broadcastAlgorithm = envString("UCXCOLL_BCAST_ALGO", c.broadcastAlgorithm);
  c.exitGraceMilliseconds = static_cast<int>(envInteger("UCXCOLL_EXIT_GRACE_MS", c.exitGraceMilliseconds));
  c.sharedMemory = envInteger("UCXCOLL_SHARED_MEMORY", 1) != 0;
  return c;
}

}  // namespace

const Config& config() {
  static const Config parsed = readConfig();
  return parsed;
}

}  // namespace ucxcoll
