/* A C program using a model exported with `kiln export` — nothing of kiln but MODEL.h and
 * libMODEL.so. Build (MODEL = the export's --name):
 *   cc -std=c11 -DMODEL=mlp -DMODEL_H='"mlp.h"' -I DIR consumer.c -L DIR -lmlp -Wl,-rpath,DIR
 * Run: consumer INPUT.npy... [-- EXPECTED.npy...] — one .npy per model input (float32 or
 * whatever dtype the model takes), then optionally the expected outputs to compare with
 * (each element within 1e-5 + 1e-4 |expected|). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include MODEL_H
#include "npy_io.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define API(f) CAT(MODEL, f)

typedef API(_tensor) tensor;

static double value_at(const void *data, int32_t dtype, size_t i) {
  if (dtype == 7) return ((const float *)data)[i];
  if (dtype == 8) return ((const double *)data)[i];
  if (dtype == 4) return (double)((const int64_t *)data)[i];
  if (dtype == 3) return ((const int32_t *)data)[i];
  return ((const uint8_t *)data)[i];
}

int main(int argc, char **argv) {
  int sep = argc;
  for (int i = 1; i < argc; ++i)
    if (strcmp(argv[i], "--") == 0) sep = i;
  const size_t n_in = (size_t)(sep - 1);
  if (n_in != API(_NUM_INPUTS)) {
    fprintf(stderr, "the model takes %d inputs:", API(_NUM_INPUTS));
    for (size_t i = 0; i < API(_NUM_INPUTS); ++i) fprintf(stderr, " %s", API(_input_name)(i));
    fprintf(stderr, "\n");
    return 2;
  }
  API(_model) *model = API(_create)(NULL);
  if (!model) {
    fprintf(stderr, "create: %s\n", API(_last_error)());
    return 1;
  }
  tensor in[API(_NUM_INPUTS) + 1];
  npy_array arrays[API(_NUM_INPUTS) + 1];
  char err[512];
  for (size_t i = 0; i < n_in; ++i) {
    if (npy_read(argv[1 + i], &arrays[i], err, sizeof err)) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    memset(&in[i], 0, sizeof in[i]);
    in[i].data = arrays[i].data;
    in[i].ndim = arrays[i].ndim;
    in[i].dtype = API(_input_dtype)(i); /* the file must hold it: the example trusts it */
    memcpy(in[i].shape, arrays[i].shape, sizeof in[i].shape);
  }
  tensor out[API(_NUM_OUTPUTS)];
  if (API(_run)(model, in, n_in, out, API(_NUM_OUTPUTS)) != 0) {
    fprintf(stderr, "run: %s\n", API(_last_error)());
    return 1;
  }
  int failed = 0;
  for (size_t o = 0; o < API(_NUM_OUTPUTS); ++o) {
    size_t count = npy_count(out[o].shape, out[o].ndim);
    printf("%s: rank %d, %zu elements", API(_output_name)(o), (int)out[o].ndim, count);
    if (sep + 1 + (int)o < argc) {
      npy_array want;
      if (npy_read(argv[sep + 1 + o], &want, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
      }
      double worst = 0; /* the largest |got - want| */
      if (npy_count(want.shape, want.ndim) != count) {
        failed = 1;
        printf(", expected %zu elements", npy_count(want.shape, want.ndim));
      } else {
        for (size_t k = 0; k < count; ++k) {
          double a = value_at(out[o].data, out[o].dtype, k), b = value_at(want.data, out[o].dtype, k);
          double diff = fabs(a - b);
          if (!(diff <= worst)) worst = diff; /* NaN counts as the worst */
          if (!(diff <= 1e-5 + 1e-4 * fabs(b)) && !(isnan(a) && isnan(b)) && a != b) failed = 1;
        }
      }
      printf(", max |difference| %g", worst);
      free(want.data);
    }
    printf("\n");
    API(_free_output)(&out[o]);
  }
  for (size_t i = 0; i < n_in; ++i) free(arrays[i].data);
  API(_destroy)(model);
  printf(failed ? "MISMATCH\n" : "OK\n");
  return failed;
}
