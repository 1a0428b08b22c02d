/* Fixed randomness and clocks for Wizer, so that the SpiderMonkey build is reproducible.
 *
 * Wizer snapshots the engine after running its initialisation, which reads WASI's random
 * numbers and clocks; Wizer answers them from the machine, and the snapshot kept what they
 * read, so two builds of one source differed in a few hundred bytes. build.mjs compiles this
 * library and runs Wizer with it preloaded (LD_PRELOAD): random bytes are a fixed sequence and
 * every clock of a thread starts at 1 s and advances 1 us per reading (a clock that never
 * advanced made the initialisation wait forever). Wizer reads both through the C library
 * (getrandom, syscall(SYS_getrandom), clock_gettime), which is what a preloaded library can
 * answer. Only Wizer runs with it, only at build time; the policy never reads either (mend
 * gives it no clock or randomness, and the build disables both features).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>

static void fill(void *buffer, size_t length) {
  unsigned char *bytes = buffer;
  for (size_t i = 0; i < length; i++) bytes[i] = (unsigned char)(i * 131 + 7);
}

/* Wizer hands its environment to the module it initialises: the variable that loaded this
 * library must not reach the snapshot. */
__attribute__((constructor)) static void forget_preload(void) { unsetenv("LD_PRELOAD"); }

ssize_t getrandom(void *buffer, size_t length, unsigned int flags) {
  (void)flags;
  fill(buffer, length);
  return (ssize_t)length;
}

int getentropy(void *buffer, size_t length) {
  fill(buffer, length);
  return 0;
}

long syscall(long number, ...) {
  va_list list;
  va_start(list, number);
  long args[6];
  for (int i = 0; i < 6; i++) args[i] = va_arg(list, long);
  va_end(list);
  if (number == SYS_getrandom) {
    fill((void *)args[0], (size_t)args[1]);
    return args[1];
  }
  static long (*real)(long, ...) = 0;
  if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  return real(number, args[0], args[1], args[2], args[3], args[4], args[5]);
}

/* Per thread, so that other threads' readings never change what the initialising one reads. */
static __thread long long nanoseconds;

int clock_gettime(clockid_t clock, struct timespec *time) {
  (void)clock;
  nanoseconds += 1000;
  time->tv_sec = 1 + nanoseconds / 1000000000LL;
  time->tv_nsec = nanoseconds % 1000000000LL;
  return 0;
}
