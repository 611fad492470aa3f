#pragma once
// What a group's setup takes from the store torch hands the backend: the
// store itself, as the torch-free setup code sees it (setup/rendezvous.hpp
// says what is agreed there and what it costs), the job's key, and where
// the job runs.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "setup/key_value_store.hpp"
#include "setup/rendezvous.hpp"
#include "transport/network_devices.hpp"

namespace ucxcoll {

// torch's store as setup/ sees it. Its errors (c10::Error: a timeout, a
// store that went away) pass through unchanged: torch's own words say
// them best.
class TorchStore final : public KeyValueStore {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override { store_->set(key, value); }
  std::vector<uint8_t> get(const std::string& key) override { return store_->get(key); }
  int64_t add(const std::string& key, int64_t increment) override { return store_->add(key, increment); }
  // A store written in Python may not implement check: it then says yes,
  // and the caller's get waits as it would have without asking.
  bool check(const std::string& key) override;
  std::vector<uint8_t> setIfAbsent(const std::string& key, const std::vector<uint8_t>& value) override {
    return store_->compareSet(key, {}, value);
  }
  // torch's clone() (a new TCPStore client under the same prefixes); a
  // store written in Python cannot clone.
  std::unique_ptr<KeyValueStore> connectAnother() override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// The job's key (see UcxTransport::setJobKey): 64 random bits that the
// first rank to ask stores under "ucxcoll/job_key" in the job's store (the
// one under any prefixes, so that every group of the job, and a torchrun
// restart of it, gets the same); 0 for a store that cannot compare-and-set.
uint64_t jobKey(const c10::intrusive_ptr<c10d::Store>& store);

// Where the job's store is and whether every rank is on this host, from
// the store (a TCPStore under any prefixes) or else MASTER_ADDR, and
// torchrun's LOCAL_WORLD_SIZE / WORLD_SIZE.
JobLocation jobLocation(const c10::intrusive_ptr<c10d::Store>& store);

}  // namespace ucxcoll
