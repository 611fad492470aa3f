#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common/process_id.hpp"
#include "common/stable_list.hpp"

using ucxcoll::currentProcessId;
using ucxcoll::StableList;

namespace {

// Counts live instances, so that the list is seen to destroy what it made.
struct Counted {
  static inline int live = 0;
  explicit Counted(int v) : value(v) { ++live; }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
  ~Counted() { --live; }
  int value;
};

}  // namespace

TEST_CASE("stable list: elements keep their addresses past the inline ones, in order", "[common]") {
  {
    StableList<Counted, 4> list;
    std::vector<const Counted*> addresses;
    for (int i = 0; i < 40; ++i) {
      addresses.push_back(&list.emplace_back(i));
    }
    CHECK(list.size() == 40);
    CHECK(Counted::live == 40);
    int expected = 0;
    for (const Counted& element : list) {
      REQUIRE(&element == addresses[static_cast<std::size_t>(expected)]);
      CHECK(element.value == expected);
      ++expected;
    }
    CHECK(expected == 40);
    CHECK(list.at(3).value == 3);
    CHECK(list.at(4).value == 4);
  }
  CHECK(Counted::live == 0);

  StableList<Counted, 4> empty;
  CHECK(empty.size() == 0);
  CHECK(empty.begin() == empty.end());
}

TEST_CASE("current process id: the process's own, and a forked child's own", "[common]") {
  const pid_t parent = currentProcessId();
  CHECK(parent == ::getpid());
  int pipeFds[2];
  REQUIRE(::pipe(pipeFds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // What the child's cached id says, against the kernel's.
    const char ok = currentProcessId() == ::getpid() && currentProcessId() != parent ? 'y' : 'n';
    (void)!::write(pipeFds[1], &ok, 1);
    ::_exit(0);
  }
  ::close(pipeFds[1]);
  char answer = '?';
  CHECK(::read(pipeFds[0], &answer, 1) == 1);
  ::close(pipeFds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(answer == 'y');
  CHECK(currentProcessId() == parent);
}
