/* Preloaded into rank processes by test_scenarios.py: reports every
 * __cxa_atexit registration made on a thread other than the main one, with
 * the file that holds the registered function. glibc takes its
 * exit-functions lock for a registration, and a fork at that moment leaves
 * the lock held in the child for good, so a library that forks safely must
 * not register exit handlers from its own threads. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

int __cxa_atexit(void (*function)(void*), void* argument, void* handle) {
  static int (*next)(void (*)(void*), void*, void*);
  if (next == NULL) {
    next = (int (*)(void (*)(void*), void*, void*))dlsym(RTLD_NEXT, "__cxa_atexit");
  }
  if (syscall(SYS_gettid) != getpid()) {
    Dl_info info;
    const char* file = dladdr((void*)function, &info) && info.dli_fname ? info.dli_fname : "?";
    fprintf(stderr, "[atexit-off-main-thread] %s\n", file);
  }
  return next(function, argument, handle);
}
