#include "backend/group_setup.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "common/logging.hpp"

namespace ucxcoll {

namespace {

c10::intrusive_ptr<c10d::Store> unprefixed(const c10::intrusive_ptr<c10d::Store>& store) {
  if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(store.get())) {
    return prefixed->getUnderlyingNonPrefixStore();
  }
  return store;
}

}  // namespace

std::unique_ptr<KeyValueStore> TorchStore::connectAnother() {
  try {
    return std::make_unique<TorchStore>(store_->clone());
  } catch (const std::exception& error) {
    UCXCOLL_DEBUG("the store cannot make a second connection: " << error.what());
    return nullptr;
  }
}

bool TorchStore::check(const std::string& key) {
  try {
    return store_->check({key});
  } catch (const std::exception& error) {  // a failing store's get says so next
    UCXCOLL_DEBUG("the store cannot check for a key: " << error.what());
    return true;
  }
}

uint64_t jobKey(const c10::intrusive_ptr<c10d::Store>& store) {
  std::random_device entropy;
  std::vector<uint8_t> proposed(8);
  for (auto& byte : proposed) {
    byte = static_cast<uint8_t>(entropy());
  }
  std::vector<uint8_t> agreed;
  try {
    agreed = unprefixed(store)->compareSet("ucxcoll/job_key", {}, proposed);
  } catch (const c10::Error& error) {
    // A store written in Python without compare_set: no key; tags then
    // guard against nothing but mix-ups within the job.
    UCXCOLL_INFO("the store cannot compare-and-set, so this job's messages carry no job key: "
                 << error.what_without_backtrace());
    return 0;
  }
  if (agreed.size() != 8) {
    throw std::runtime_error("the store's ucxcoll/job_key holds " + std::to_string(agreed.size()) +
                             " bytes, not 8 (written by something else?)");
  }
  uint64_t key = 0;
  for (uint8_t byte : agreed) {
    key = (key << 8) | byte;
  }
  return key;
}

JobLocation jobLocation(const c10::intrusive_ptr<c10d::Store>& store) {
  JobLocation where;
  c10::intrusive_ptr<c10d::Store> base = unprefixed(store);
  if (auto* tcp = dynamic_cast<c10d::TCPStore*>(base.get())) {
    where.storeHost = tcp->getHost();
  } else if (const char* master = std::getenv("MASTER_ADDR")) {
    where.storeHost = master;
  }
  const char* localWorld = std::getenv("LOCAL_WORLD_SIZE");
  const char* world = std::getenv("WORLD_SIZE");
  where.allRanksOnThisHost =
      localWorld != nullptr && world != nullptr && *world != '\0' && std::strcmp(localWorld, world) == 0;
  return where;
}

}  // namespace ucxcoll
