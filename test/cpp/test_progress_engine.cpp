#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "transport/progress_engine.hpp"

using namespace ucxcoll;

namespace {

// Records the thread that destroys it, the way a tensor owned by Python
// would need that thread to take the GIL.
struct DestroyedOn {
  std::shared_ptr<std::thread::id> where;
  explicit DestroyedOn(std::shared_ptr<std::thread::id> out) : where(std::move(out)) {}
  ~DestroyedOn() {
    if (where) {
      *where = std::this_thread::get_id();
    }
  }
};

}  // namespace

TEST_CASE("the engine runs tasks in the order they were handed over", "[engine]") {
  ProgressEngine engine;
  std::vector<int> order;
  for (int i = 0; i < 20; ++i) {
    engine.enqueue([&order, i] { order.push_back(i); });
  }
  engine.runSync([] {});  // after every task enqueued before it
  std::vector<int> expected(20);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(order == expected);
}

TEST_CASE("a task the engine thread ran is destroyed by a caller, not by the engine", "[engine]") {
  ProgressEngine engine;
  auto destroyedOn = std::make_shared<std::thread::id>();
  std::thread::id ranOn;
  auto owned = std::make_shared<DestroyedOn>(destroyedOn);
  engine.enqueue([&ranOn, owned = std::move(owned)] { ranOn = std::this_thread::get_id(); });
  engine.runSync([] {});  // the task above has run once this returns
  CHECK(ranOn != std::this_thread::get_id());
  CHECK(*destroyedOn == std::thread::id());  // still alive, retired
  engine.destroyRetiredTasks();
  CHECK(*destroyedOn == std::this_thread::get_id());
}

TEST_CASE("a task handed over after the engine thread stopped runs on the caller", "[engine]") {
  // At process exit the thread is stopped first; a group torn down later
  // (e.g. by a static destructor) must not wait for it forever.
  ProgressEngine engine;
  engine.stopThread();
  std::thread::id ranOn;
  int result = engine.runSync([&ranOn] {
    ranOn = std::this_thread::get_id();
    return 42;
  });
  CHECK(result == 42);
  CHECK(ranOn == std::this_thread::get_id());
}

TEST_CASE("waitUntilIdle returns once every task handed over has run", "[engine]") {
  ProgressEngine engine;
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  engine.enqueue([&] {
    while (!release.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ++ran;
  });
  engine.enqueue([&] { ++ran; });
  CHECK_FALSE(engine.waitUntilIdle(std::chrono::milliseconds(20)));  // the first task still runs
  release = true;
  CHECK(engine.waitUntilIdle(std::chrono::seconds(30)));
  CHECK(ran.load() == 2);
}
