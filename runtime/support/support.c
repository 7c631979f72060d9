/* The host side of kiln_support: the loop-nest helpers compiled once into kiln. */
#include "runtime/support/support.h"
#include "runtime/module_abi.h"
#include "runtime/support/gemm.h"
#include "runtime/support/kiln_index.h"
#include "runtime/support/kiln_window.h"

_Static_assert(KILN_MAX_DIMS == 16, "kiln_support's stride arrays are declared [][16]");

const kiln_support* kiln_host_support(void) {
  static const kiln_support table = {
      sizeof(kiln_support), kiln_collapse,     kiln_part_range, kiln_seek,
      kiln_copy_nd,         kiln_copy_strided, kiln_slice_dim,  kiln_im2col_f32,
      kiln_im2col_f64,      kiln_pool_f32,     kiln_pool_f64,   kiln_support_gemm_f32,
      kiln_support_gemm_f64};
  return &table;
}
