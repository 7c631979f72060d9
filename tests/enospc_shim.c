/* LD_PRELOAD shim for tests: write(2) to a file whose path contains $KILN_TEST_ENOSPC fails
   with ENOSPC, as on a full disk. Everything else goes to the real write. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int full(int fd) {
  const char* pattern = getenv("KILN_TEST_ENOSPC");
  if (!pattern || !*pattern) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strstr(path, pattern) != NULL;
}

ssize_t write(int fd, const void* buf, size_t count) {
  static ssize_t (*real)(int, const void*, size_t);
  if (!real) real = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  if (full(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd, buf, count);
}
