#pragma once
// Error types shared by the torch-free layers. The backend layer maps them to
// the matching Python exception (see backend/errors.hpp).

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ucxcoll {

// A failure of the transport or of a collective (peer gone, truncated message).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The operation's deadline passed before every peer delivered.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what, std::vector<int> silentPeers = {})
      : Error(what), silentPeers_(std::move(silentPeers)) {}
  // The ranks this operation still waited to hear from, in ascending order.
  const std::vector<int>& silentPeers() const { return silentPeers_; }

 private:
  std::vector<int> silentPeers_;
};

// Ranks disagree about a collective (different sizes, dtypes or order).
class MismatchError : public Error {
 public:
  using Error::Error;
};

// A peer process of the group died: the operation cannot complete, and the
// group cannot be used again.
class PeerGoneError : public Error {
 public:
  using Error::Error;
};

// Peers that no network device of this host can reach (UCX finds no route
// to any address they offer): the group cannot be set up.
class UnreachableError : public Error {
 public:
  explicit UnreachableError(const std::string& what, std::vector<int> ranks = {})
      : Error(what), ranks_(std::move(ranks)) {}
  // The group ranks that cannot be reached, ascending (empty where the
  // transport, which knows no ranks, raised it).
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  std::vector<int> ranks_;
};

// The group was shut down or aborted while the operation was pending.
class AbortedError : public Error {
 public:
  using Error::Error;
};

}  // namespace ucxcoll
