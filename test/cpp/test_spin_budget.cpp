#include <catch2/catch.hpp>

#include <chrono>

#include "engine/spin_budget.hpp"

using namespace std::chrono_literals;
using ucxcoll::SpinBudget;

namespace {

void note(SpinBudget& budget, int times, SpinBudget::Duration waited) {
  for (int i = 0; i < times; ++i) {
    budget.noteWait(waited);
  }
}

}  // namespace

TEST_CASE("spin budget: a waiting thread polls for 1.5x the usual wait, between floor and ceiling", "[engine]") {
  SpinBudget budget(250us, 2ms, true);
  CHECK(budget.budget() == 250us);
  note(budget, 32, 600us);
  CHECK(budget.budget() == 900us);

  SECTION("short waits poll the floor") {
    note(budget, 32, 10us);
    CHECK(budget.budget() == 250us);
  }
  SECTION("waits close to the ceiling poll the ceiling") {
    note(budget, 32, 1800us);
    CHECK(budget.budget() == 2ms);
  }
  SECTION("when most waits outlast the ceiling, polling stops at the floor and sleeping takes over") {
    note(budget, 32, 10ms);
    CHECK(budget.budget() == 250us);
  }
  SECTION("a few long waits among short ones do not stretch the budget") {
    note(budget, 25, 400us);
    note(budget, 7, 10ms);
    CHECK(budget.budget() == 600us);
  }
}

TEST_CASE("spin budget: a budget the user fixed does not adapt", "[engine]") {
  SpinBudget budget(100us, 2ms, false);
  note(budget, 64, 1ms);
  CHECK(budget.budget() == 100us);
}
