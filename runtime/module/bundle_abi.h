/* What an exported library's generated glue (kiln export) calls: the model's image — its
 * program description, its weights and its statically linked module — handed to kiln's
 * runtime, linked into the same library. Plain C11; pasted into every glue unit. */
#ifndef KILN_BUNDLE_ABI_H
#define KILN_BUNDLE_ABI_H
#include <stddef.h>
#include <stdint.h>

#define KILN_BUNDLE_MAX_DIMS 16

/* Row-major and contiguous; the library allocates outputs (free them through it). */
typedef struct kiln_bundle_tensor {
  void* data;
  int64_t shape[KILN_BUNDLE_MAX_DIMS];
  int32_t ndim;
  int32_t dtype;
} kiln_bundle_tensor;

typedef struct kiln_bundle_image {
  const char* name;
  const char* id; /* identifies the model and its weights; the weights file must carry it */
  const char* description; /* the program (runtime/module/bundle_description.h), JSON */
  size_t description_size;
  const void* weights; /* the embedded safetensors bytes, or NULL: a file */
  size_t weights_size;
  const char* weights_file; /* the file's name beside the library, when not embedded */
  const void* (*module)(const void* support); /* the module's kiln_module() */
  const void* anchor; /* an address inside the library: where it was loaded from */
} kiln_bundle_image;

#ifdef __cplusplus
extern "C" {
#endif

/* NULL on failure (see kiln_bundle_error). weights_path NULL: the embedded weights, or
 * weights_file beside the library. */
void* kiln_bundle_create(const kiln_bundle_image* image, const char* weights_path);
/* 0 on success; outputs are filled in (data allocated by the library). */
int kiln_bundle_run(void* bundle, const kiln_bundle_tensor* inputs, size_t n_inputs,
                    kiln_bundle_tensor* outputs, size_t n_outputs);
void kiln_bundle_free_output(kiln_bundle_tensor* output);
void kiln_bundle_destroy(void* bundle);
/* The calling thread's last error message ("" when none). */
const char* kiln_bundle_error(void);

#ifdef __cplusplus
}
#endif

#endif
