/* Reading and writing .npy files (format 1.0, little-endian, C order) for the export
 * consumers: what a program that uses an exported kiln library needs to feed it test data.
 * Plain C11, header-only. */
#ifndef KILN_EXAMPLE_NPY_IO_H
#define KILN_EXAMPLE_NPY_IO_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct npy_array {
  void *data;
  int64_t shape[16];
  int32_t ndim;
  char descr[8]; /* "<f4", "<i8", ... */
  size_t itemsize;
} npy_array;

/* 0 on success; on failure a message in err. */
static int npy_read(const char *path, npy_array *a, char *err, size_t err_size) {
  memset(a, 0, sizeof *a);
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_size, "%s: cannot open", path);
    return 1;
  }
  unsigned char pre[10];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1) {
    snprintf(err, err_size, "%s: not a version 1 .npy file", path);
    fclose(f);
    return 1;
  }
  size_t hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
  char *h = (char *)calloc(hlen + 1, 1);
  if (!h || fread(h, 1, hlen, f) != hlen) {
    snprintf(err, err_size, "%s: truncated header", path);
    free(h);
    fclose(f);
    return 1;
  }
  const char *d = strstr(h, "'descr': '");
  const char *s = strstr(h, "'shape': (");
  if (!d || !s || strstr(h, "'fortran_order': True")) {
    snprintf(err, err_size, "%s: unsupported header %s", path, h);
    free(h);
    fclose(f);
    return 1;
  }
  d += 10;
  size_t n = 0;
  while (d[n] && d[n] != '\'' && n + 1 < sizeof a->descr) n++;
  memcpy(a->descr, d, n);
  a->itemsize = (size_t)atoi(a->descr + 2);
  size_t count = 1;
  for (s += 10; *s && *s != ')';) {
    if (*s == ',' || *s == ' ') {
      s++;
      continue;
    }
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || a->ndim == 16) break;
    a->shape[a->ndim++] = v;
    count *= (size_t)v;
    s = end;
  }
  free(h);
  a->data = malloc(count * a->itemsize + 1);
  if (!a->data || fread(a->data, a->itemsize, count, f) != count) {
    snprintf(err, err_size, "%s: truncated data", path);
    free(a->data);
    a->data = NULL;
    fclose(f);
    return 1;
  }
  fclose(f);
  return 0;
}

static size_t npy_count(const int64_t *shape, int32_t ndim) {
  size_t n = 1;
  for (int32_t i = 0; i < ndim; ++i) n *= (size_t)shape[i];
  return n;
}

#endif
