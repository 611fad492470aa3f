#pragma once
// Minimal leveled logging to stderr; the level comes from UCXCOLL_LOG_LEVEL.

#include <sstream>
#include <string>

namespace ucxcoll {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel logLevel();
void logMessage(LogLevel level, const std::string& message);

}  // namespace ucxcoll

#define UCXCOLL_LOG(level, expr)                                              \
  do {                                                                        \
    if (static_cast<int>(level) <= static_cast<int>(::ucxcoll::logLevel())) { \
      std::ostringstream ucxcoll_log_stream_;                                 \
      ucxcoll_log_stream_ << expr;                                            \
      ::ucxcoll::logMessage(level, ucxcoll_log_stream_.str());                \
    }                                                                         \
  } while (0)

#define UCXCOLL_WARN(expr) UCXCOLL_LOG(::ucxcoll::LogLevel::Warn, expr)
#define UCXCOLL_INFO(expr) UCXCOLL_LOG(::ucxcoll::LogLevel::Info, expr)
#define UCXCOLL_DEBUG(expr) UCXCOLL_LOG(::ucxcoll::LogLevel::Debug, expr)
