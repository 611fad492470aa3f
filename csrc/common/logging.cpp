#include "common/logging.hpp"

#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/config.hpp"

namespace ucxcoll {

LogLevel logLevel() {
  return config().logLevel;
}

void logMessage(LogLevel level, const std::string& message) {
  static const char* names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  // One write per line: the ranks of a job usually share one stderr, and
  // a line written in pieces interleaves with theirs.
  std::string line = std::string("[ucxcoll ") + names[static_cast<int>(level)] + " pid " + std::to_string(getpid()) +
                     "] " + message + "\n";
  std::size_t written = 0;
  while (written < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;  // stderr is closed or broken: nowhere to log
    }
    written += static_cast<std::size_t>(n);
  }
}

}  // namespace ucxcoll
