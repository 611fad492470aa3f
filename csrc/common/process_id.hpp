#pragma once
// This process's id, without a system call. glibc no longer caches getpid()
// (2.25 on), and the per-operation path asks for it to tell a forked child
// from its parent: a syscall per collective on these VMs costs as much as
// the collective's own bookkeeping. The value is refreshed in a forked
// child by a pthread_atfork handler, so it is right in both processes.

#include <sys/types.h>

namespace ucxcoll {

pid_t currentProcessId();

}  // namespace ucxcoll
