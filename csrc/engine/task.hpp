#pragma once
// Task: the coroutine type every operation's body returns. An algorithm is
// written top to bottom, with `co_await` wherever it waits for messages:
//
//   Task allreduceDirect(Collective& c, ...) {
//     c.recv(...); c.send(...);
//     co_await c.all();
//     reduce(...);
//   }
//
// A Task starts suspended; the engine resumes it, and it suspends at each
// co_await until what it waits for is done. A Task can also co_await another
// Task (a composite algorithm calling a sub-algorithm); the inner one then
// resumes the outer one when it returns (symmetric transfer, so no stack
// grows). An exception escaping the body fails the operation.

#include <coroutine>
#include <exception>
#include <utility>

namespace ucxcoll {

class [[nodiscard]] Task {
 public:
  struct promise_type {
    std::coroutine_handle<> continuation;  // the Task awaiting this one, if any
    std::exception_ptr error;

    Task get_return_object() { return Task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) noexcept {
        auto next = self.promise().continuation;
        return next ? next : std::noop_coroutine();
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { error = std::current_exception(); }
  };
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle handle) : handle_(handle) {}
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  bool valid() const { return static_cast<bool>(handle_); }
  bool done() const { return handle_.done(); }
  Handle handle() const { return handle_; }
  // The exception that ended the body, if any (once done()).
  std::exception_ptr error() const { return handle_.promise().error; }
  // Destroys the frame (and the locals of a suspended body).
  void reset() {
    if (handle_) {
      std::exchange(handle_, {}).destroy();
    }
  }

  // co_await on a Task runs it to completion, then continues the awaiter;
  // an exception escaping it is rethrown in the awaiter.
  auto operator co_await() noexcept {
    struct Awaiter {
      Handle inner;
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> outer) noexcept {
        inner.promise().continuation = outer;
        return inner;
      }
      void await_resume() {
        if (inner.promise().error) {
          std::rethrow_exception(inner.promise().error);
        }
      }
    };
    return Awaiter{handle_};
  }

 private:
  Handle handle_;
};

}  // namespace ucxcoll
