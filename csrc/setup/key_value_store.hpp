#pragma once
// The little a group's setup needs from the store that the job shares
// (torch's c10d::Store in the extension, an in-memory map in the tests and
// the start-up simulation): setup code stays free of torch.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ucxcoll {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Waits until `key` exists (up to the store's own timeout, which throws).
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Whether `key` exists, without waiting.
  virtual bool check(const std::string& key) = 0;
  // Adds `increment` to the counter under `key` (0 if absent); the sum.
  virtual int64_t add(const std::string& key, int64_t increment) = 0;
  // Sets `key` to `value` unless it exists; what `key` holds afterwards.
  virtual std::vector<uint8_t> setIfAbsent(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // A second connection to the same store, for a thread that must write
  // while this one waits in get(); null where the store cannot make one.
  virtual std::unique_ptr<KeyValueStore> connectAnother() = 0;
};

}  // namespace ucxcoll
