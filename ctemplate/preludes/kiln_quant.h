/* kiln_quant.h — the integer matmul and convolution of the qmatmul and qconv ops: operands
 * brought to the u8 x s8 form of kiln_support.qgemm_u8s8 (activations flipped to uint8,
 * weights packed as int8), zero points and scales gathered into the kernel's epilogue, and
 * the work split by rows (positions) among the parts of a split call.
 * module_abi.h comes first (in a module, and in the tests). */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H
#ifndef KILN_HELPER
#define KILN_HELPER static inline __attribute__((unused))
#endif
#include <stdint.h>
#include <string.h>

/* The quantization parameters of one product, as the ops hand them over. */
typedef struct kiln_qparams {
  const kiln_tensor *az, *bz; /* zero points of A (scalar) and B (scalar or per column) */
  const kiln_tensor* scale;   /* NULL: int32 output; else the multiplier, scalar or per column */
  const kiln_tensor* yz;      /* the output's zero point (with scale) */
  const kiln_tensor* bias;    /* int32 per column, or NULL */
  int a_s8, b_u8, out_u8, relu; /* out_u8: 1 uint8, 0 int8, KILN_Q_OUT_F32 float32 */
  /* NULL, or 256 bytes: each output byte b becomes table[b] (a quantized activation fused as a
   * convolution's epilogue), applied to a part's bytes right after they are made. kiln_qconv
   * with channels-last bytes out only. */
  const uint8_t* table;
} kiln_qparams;

/* Element i of a scalar or 1-D zero-point tensor, widened. */
KILN_HELPER int32_t kiln_q_at(const kiln_tensor* t, int is_signed, int64_t i) {
  const int64_t at = t->ndim > 0 ? i * t->strides[t->ndim - 1] : 0;
  return is_signed ? (int32_t)((const int8_t*)t->data)[at] : (int32_t)((const uint8_t*)t->data)[at];
}

KILN_HELPER int64_t kiln_q_numel(const kiln_tensor* t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

/* Row-major with no gaps (size-1 dimensions may have any stride). */
KILN_HELPER int kiln_q_contiguous(const kiln_tensor* t) {
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != expect) return 0;
    expect *= t->shape[d];
  }
  return 1;
}

/* t's bytes row-major: itself when it already is, else a copy in the workspace (NULL after
 * ctx->fail). */
KILN_HELPER const uint8_t* kiln_q_dense(kiln_ctx* ctx, const kiln_support* sup,
                                        const kiln_tensor* t, const char* what) {
  if (kiln_q_contiguous(t)) return (const uint8_t*)t->data;
  uint8_t* copy = (uint8_t*)ctx->workspace(ctx, (size_t)kiln_q_numel(t) + 1);
  if (!copy) {
    ctx->fail(ctx, "out of memory for a dense copy of %s", what);
    return 0;
  }
  sup->copy_strided(copy, t->data, t->ndim, t->shape, t->strides, 1);
  return copy;
}

/* The epilogue of columns [0, n) of a product over k: B's zero points shifted as B was
 * packed (uint8 by -128), A's as A is flipped (int8 by +128), scales and bias as given.
 * Returns non-zero after ctx->fail. */
KILN_HELPER int kiln_q_epilogue(kiln_ctx* ctx, const kiln_qparams* q, int64_t n,
                                kiln_qgemm_epi* e) {
  const int64_t nb = kiln_q_numel(q->bz);
  int32_t* bz = (int32_t*)ctx->workspace(ctx, (size_t)(nb > 0 ? nb : 1) * sizeof(int32_t));
  if (!bz) {
    ctx->fail(ctx, "out of memory for the zero points of an integer product");
    return 1;
  }
  for (int64_t j = 0; j < nb; ++j) bz[j] = kiln_q_at(q->bz, !q->b_u8, j) - (q->b_u8 ? 128 : 0);
  e->a_zp = kiln_q_at(q->az, q->a_s8, 0) + (q->a_s8 ? 128 : 0);
  e->b_zp = bz;
  e->b_zp_step = nb > 1 ? 1 : 0;
  e->bias = q->bias ? (const int32_t*)q->bias->data : 0;
  e->scale = q->scale ? (const float*)q->scale->data : 0;
  e->scale_step = q->scale && kiln_q_numel(q->scale) > 1 ? 1 : 0;
  e->y_zp = q->yz ? kiln_q_at(q->yz, !q->out_u8, 0) : 0;
  e->lo = q->out_u8 ? 0 : -128;
  e->hi = q->out_u8 ? 255 : 127;
  if (q->relu) e->lo = e->y_zp;
  e->out_u8 = q->out_u8;
  (void)n;
  return 0;
}

/* Bytes of a packed k x n operand: its panels, then its column sums. */
KILN_HELPER int64_t kiln_q_packed_bytes(int64_t k, int64_t n) {
  const int64_t np = (n + 15) / 16;
  return np * ((k + 3) / 4) * 64 + np * 16 * (int64_t)sizeof(int32_t);
}

/* Y[..., M, N] = A[..., M, K] B, with B (K, N) or one (K, N) per leading index of A (batched),
 * or packed (bpacked, for N = packed_n columns). A is read with its strides. rows_only: the
 * parts take runs of whole rows, one row the grain, never column panels (an epilogue follows
 * them, QMatMul's split_rows). */
KILN_HELPER int kiln_qmatmul(kiln_ctx* ctx, const kiln_support* sup, const kiln_tensor* A,
                             const kiln_tensor* B, int64_t packed_n, const kiln_qparams* q,
                             kiln_tensor* Y, int rows_only) {
  const int ra = A->ndim, ry = Y->ndim;
  const int64_t K = A->shape[ra - 1], N = Y->shape[ry - 1];
  const int64_t rows_total = kiln_q_numel(Y) / (N > 0 ? N : 1);
  if (N == 0 || rows_total == 0) return 0;
  const int batched = !packed_n && B->ndim > 2;
  const int64_t per_batch = batched ? A->shape[ra - 2] : rows_total;
  /* Fewer rows than a kernel tile per part (a classifier's one row), or a B of a megabyte and
   * more that is wider than A is tall (a language model's head: 128 rows by 50257 columns; a
   * transformer's 768 x 3072 layers at 128 tokens): the parts take the packed B's column
   * panels instead, each streaming only its share of the weight from memory rather than all
   * of it (QMatMul::c_split_unit). From 8 MB down to 1 MB, BERT's dynamic int8 file went from
   * 7.0 to 6.3 ms in onnx_bench. */
  const int by_columns =
      packed_n && ctx->n_parts > 1 && !rows_only &&
      (rows_total < 6 * (int64_t)ctx->n_parts || (N >= 4 * rows_total && K * N >= (1 << 20)));
  int64_t lo = 0, hi = rows_total, c0 = 0, c1 = N;
  if (by_columns) {
    int64_t p0, p1;
    sup->part_range((N + 15) / 16, ctx->part, ctx->n_parts, 1, &p0, &p1);
    c0 = p0 * 16;
    c1 = p1 * 16 < N ? p1 * 16 : N;
    if (c0 >= c1) return 0;
  } else {
    sup->part_range(rows_total, ctx->part, ctx->n_parts, rows_only ? 1 : 6, &lo, &hi);
  }
  if (lo >= hi) return 0;
  kiln_qgemm_epi e;
  if (kiln_q_epilogue(ctx, q, N, &e)) return 1;
  /* Bytes per output element: int32 and float32 outputs 4, requantized ones 1. */
  const int64_t esize = q->scale && q->out_u8 != KILN_Q_OUT_F32 ? 1 : 4;
  e.rsc = N;
  e.csc = 1;
  /* A's rows as dense uint8: in place when it already is, else copied (and this part's rows
   * flipped from int8). */
  const uint8_t* pa = kiln_q_dense(ctx, sup, A, "an integer product's A");
  if (!pa) return 1;
  if (q->a_s8) {
    uint8_t* flipped = (uint8_t*)ctx->workspace(ctx, (size_t)(rows_total * K + 1));
    if (!flipped) {
      ctx->fail(ctx, "out of memory for an integer product's A as uint8 (%lld bytes)",
                (long long)(rows_total * K));
      return 1;
    }
    for (int64_t i = lo * K; i < hi * K; ++i) flipped[i] = pa[i] ^ 0x80;
    pa = flipped;
  }
  if (packed_n) {
    const int64_t np = (N + 15) / 16;
    const int8_t* bp = (const int8_t*)B->data;
    /* Columns [c0, c1): their panels, column sums and per-column parameters. */
    e.colsum = (const int32_t*)(bp + np * ((K + 3) / 4) * 64) + c0;
    e.b_zp += e.b_zp_step * c0;
    if (e.bias) e.bias += c0;
    if (e.scale) e.scale += e.scale_step * c0;
    sup->qgemm_u8s8(hi - lo, c1 - c0, K, pa + lo * K, K, bp + (c0 / 16) * ((K + 3) / 4) * 64, &e,
                    (char*)Y->data + (lo * N + c0) * esize);
    return 0;
  }
  const int rb = B->ndim;
  int8_t* bp = (int8_t*)ctx->workspace(ctx, (size_t)kiln_q_packed_bytes(K, N));
  if (!bp) {
    ctx->fail(ctx, "out of memory for an integer product's packed B (%lld bytes)",
              (long long)kiln_q_packed_bytes(K, N));
    return 1;
  }
  int32_t* colsum = (int32_t*)(bp + ((N + 15) / 16) * ((K + 3) / 4) * 64);
  e.colsum = colsum;
  for (int64_t b0 = lo / per_batch; b0 * per_batch < hi; ++b0) {
    const int64_t r0 = b0 * per_batch > lo ? b0 * per_batch : lo;
    const int64_t r1 = (b0 + 1) * per_batch < hi ? (b0 + 1) * per_batch : hi;
    /* B's offset for batch b0: its leading indices from b0, most minor last. */
    int64_t off = 0, rest = b0;
    if (batched) {
      for (int d = rb - 3; d >= 0; --d) {
        off += (rest % B->shape[d]) * B->strides[d];
        rest /= B->shape[d];
      }
    }
    sup->qpack(K, N, (const uint8_t*)B->data + off, B->strides[rb - 2], B->strides[rb - 1], q->b_u8,
               bp, colsum);
    sup->qgemm_u8s8(r1 - r0, N, K, pa + r0 * K, K, bp, &e, (char*)Y->data + r0 * N * esize);
  }
  return 0;
}

/* One image's padded rows [r0, r1) channels-last from a channels-last image x (h, w, c):
 * buf[(y*wp + x)*c + ci], wp = pw + w + ew, padding `fill`, each byte xor `flip` (what
 * kiln_support.qnhwc makes from a channels-first image, here one copy per row). */
KILN_HELPER void kiln_q_pad_rows(const uint8_t* x, int64_t c, const kiln_window* g, int64_t r0,
                                 int64_t r1, uint8_t fill, uint8_t flip, uint8_t* buf) {
  const int64_t hp = g->ph + g->h + g->eh, wp = g->pw + g->w + g->ew, run = g->w * c;
  if (r0 < 0) r0 = 0;
  if (r1 > hp) r1 = hp;
  for (int64_t r = r0; r < r1; ++r) {
    uint8_t* row = buf + r * wp * c;
    const int64_t y = r - g->ph;
    if (y < 0 || y >= g->h) {
      memset(row, fill, (size_t)(wp * c));
      continue;
    }
    memset(row, fill, (size_t)(g->pw * c));
    uint8_t* dst = row + g->pw * c;
    const uint8_t* src = x + y * run;
    if (flip) {
      for (int64_t i = 0; i < run; ++i) dst[i] = (uint8_t)(src[i] ^ flip);
    } else {
      memcpy(dst, src, (size_t)run);
    }
    memset(dst + run, fill, (size_t)(g->ew * c));
  }
}

/* Y (N, M, OH, OW) = the grouped convolution of X (N, C, H, W) by W (M, C/group, kh, kw), or
 * by W packed per group (w_packed), positions split among the parts; layout bit 1: X is
 * (N, H, W, C), bit 2: Y is (N, OH, OW, M) (a depthwise one takes both or neither). Each
 * image goes channels-last with its padding (kiln_support.qnhwc, or kiln_q_pad_rows when it
 * already is channels-last), each chunk of positions becomes rows of taps (ky, kx, ci)
 * (qim2row; a 1x1 window at stride 1 reads the image's rows as they are, a channels-last
 * uint8 X in place), and each group's rows multiply its packed weight. */
/* Rows r0..r1 of the padded image of a three-channel channels-first X, widened to four
 * channels per pixel (QConv's c4): each pixel one 32-bit word, its fourth byte and the
 * padding `fill` (the zero point, so they add nothing), the others flipped as qnhwc does. */
KILN_HELPER void kiln_q_widen4(const uint8_t* x, int64_t plane, const kiln_window* g, int64_t r0,
                               int64_t r1, uint8_t fill, uint8_t flip, uint8_t* buf) {
  const int64_t hp = g->ph + g->h + g->eh, wp = g->pw + g->w + g->ew;
  const uint32_t pad = (uint32_t)fill * 0x01010101u, flip3 = (uint32_t)flip * 0x010101u;
  if (r0 < 0) r0 = 0;
  if (r1 > hp) r1 = hp;
  for (int64_t r = r0; r < r1; ++r) {
    uint32_t* row = (uint32_t*)(buf + r * wp * 4);
    const int64_t y = r - g->ph;
    if (y < 0 || y >= g->h) {
      for (int64_t i = 0; i < wp; ++i) row[i] = pad;
      continue;
    }
    for (int64_t i = 0; i < g->pw; ++i) row[i] = pad;
    for (int64_t i = g->pw + g->w; i < wp; ++i) row[i] = pad;
    const uint8_t *a = x + y * g->w, *b = a + plane, *c = b + plane;
    uint32_t* o = row + g->pw;
    for (int64_t i = 0; i < g->w; ++i)
      o[i] = ((uint32_t)a[i] | (uint32_t)b[i] << 8 | (uint32_t)c[i] << 16 | (pad & 0xff000000u)) ^
             flip3;
  }
}

KILN_HELPER int kiln_qconv(kiln_ctx* ctx, const kiln_support* sup, const kiln_tensor* X,
                           const kiln_tensor* W, int w_packed, int layout, const kiln_window* g,
                           int64_t group, const kiln_qparams* q, kiln_tensor* Y) {
  const int xl = layout & 1, yl = (layout & 2) != 0, c4 = (layout & 4) != 0;
  const int64_t n_img = X->shape[0], C = X->shape[xl ? 3 : 1], M = Y->shape[yl ? 3 : 1];
  const int64_t hw = g->oh * g->ow, cg = C / group, mg = M / group;
  /* cb: channels per pixel of the padded image; cp: channels per tap of a product's rows
   * (four for a widened three-channel image, c4). */
  const int64_t cb = c4 ? 4 : C, cp = c4 ? 4 : cg;
  const int64_t taps = g->kh * g->kw, kg = cp * taps;
  if (c4 && (C != 3 || group != 1 || xl || !w_packed)) {
    ctx->fail(ctx,
              "a widened integer convolution takes a packed three-channel channels-first image");
    return 1;
  }
  if (n_img == 0 || hw == 0 || M == 0) return 0;
  if (q->table && !(yl && q->scale && q->out_u8 != KILN_Q_OUT_F32)) {
    ctx->fail(ctx, "an integer convolution's byte table needs channels-last bytes out");
    return 1;
  }
  kiln_qgemm_epi e0;
  if (kiln_q_epilogue(ctx, q, M, &e0)) return 1;
  const uint8_t* px = kiln_q_dense(ctx, sup, X, "an integer convolution's input");
  if (!px) return 1;
  const size_t esize = q->scale ? 1 : 4;
  if (!w_packed && cg == 1 && mg == 1 && taps <= 64) {
    /* Depthwise: row loops per channel (kiln_support.qdepthwise), channels split among the
     * parts. */
    const uint8_t* pw = kiln_q_dense(ctx, sup, W, "an integer convolution's weight");
    if (!pw) return 1;
    const uint8_t flip = q->a_s8 ? 0x80 : 0;
    if (xl != yl) {
      ctx->fail(ctx, "a depthwise integer convolution takes one layout for input and output");
      return 1;
    }
    if (yl) {
      /* Output rows split among the parts, every channel each. */
      int64_t r0, r1;
      sup->part_range(n_img * g->oh, ctx->part, ctx->n_parts, 1, &r0, &r1);
      for (int64_t u = r0; u < r1;) {
        const int64_t img = u / g->oh, y0 = u % g->oh;
        const int64_t y1 = (img + 1) * g->oh <= r1 ? g->oh : r1 - img * g->oh;
        sup->qdepthwise_nhwc(px + img * g->h * g->w * C, g, C, y0, y1, flip, pw, q->b_u8, &e0,
                             (char*)Y->data + img * hw * M * (int64_t)esize);
        if (q->table) {
          uint8_t* rows = (uint8_t*)Y->data + (img * hw + y0 * g->ow) * M;
          sup->lut_bytes(rows, rows, (y1 - y0) * g->ow * M, q->table);
        }
        u = img * g->oh + y1;
      }
      return 0;
    }
    int64_t c0, c1;
    sup->part_range(n_img * C, ctx->part, ctx->n_parts, 1, &c0, &c1);
    for (int64_t u = c0; u < c1;) {
      const int64_t img = u / C, ch0 = u % C;
      const int64_t ch1 = (img + 1) * C <= c1 ? C : c1 - img * C;
      sup->qdepthwise(px + img * C * g->h * g->w, g, ch0, ch1, flip, pw, q->b_u8, &e0,
                      (char*)Y->data + img * M * hw * (int64_t)esize);
      u = img * C + ch1;
    }
    return 0;
  }
  int64_t lo, hi;
  /* Parts of whole output positions, one position the grain: an epilogue fused after this
   * call (QConv::c_split_unit) takes the same share. */
  sup->part_range(n_img * hw, ctx->part, ctx->n_parts, 1, &lo, &hi);
  if (lo >= hi) return 0;
  const int64_t gbytes = kiln_q_packed_bytes(kg, mg);
  const int8_t* wp = (const int8_t*)W->data;
  if (!w_packed) {
    const uint8_t* pw = kiln_q_dense(ctx, sup, W, "an integer convolution's weight");
    int8_t* packed = (int8_t*)ctx->workspace(ctx, (size_t)(gbytes * group));
    uint8_t* order = (uint8_t*)ctx->workspace(ctx, (size_t)(mg * kg + 1));
    if (!pw || !packed || !order) {
      if (pw) ctx->fail(ctx, "out of memory for an integer convolution's packed weight");
      return 1;
    }
    for (int64_t gi = 0; gi < group; ++gi) {
      /* Each output channel's weights in the rows' tap order (ky, kx, ci). */
      for (int64_t m = 0; m < mg; ++m)
        for (int64_t ci = 0; ci < cg; ++ci)
          for (int64_t t = 0; t < taps; ++t)
            order[m * kg + t * cg + ci] = pw[((gi * mg + m) * cg + ci) * taps + t];
      int8_t* dst = packed + gi * gbytes;
      /* B[t][m] = the reordered W[m][t]: rows of W are the product's columns. */
      sup->qpack(kg, mg, order, 1, kg, q->b_u8, dst,
                 (int32_t*)(dst + ((mg + 15) / 16) * ((kg + 3) / 4) * 64));
    }
    wp = packed;
  }
  const int64_t hp = g->ph + g->h + g->eh, wpad = g->pw + g->w + g->ew;
  enum { kChunk = 96 };
  const int direct =
      taps == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && g->eh == 0 && g->ew == 0;
  const uint8_t flip = q->a_s8 ? 0x80 : 0;
  /* A channels-last uint8 image under a 1x1 window at stride 1 is already the rows. */
  const int in_place = xl && direct && !flip;
  /* Windows read in place by the GEMM where the CPU's kernel can (every 4-byte group of a
   * row within one tap: cg a multiple of 4): a window row's taps are one run of bytes with
   * dilation 1 and every channel, else each tap is its own run. */
  enum { kMaxSegments = 256 };
  const int whole_rows = g->dw == 1 && group == 1;
  const int64_t n_seg = whole_rows ? g->kh : taps, seg_len = whole_rows ? g->kw * cp : cp;
  const int gather = !direct && sup->qgemm_u8s8_gather && cp % 4 == 0 && n_seg <= kMaxSegments;
  /* An unpadded channels-last uint8 image is its own padded copy: the GEMM reads its windows
   * from it in place (a ResNet's 1x1 stride-2 downsample copied its whole input first). */
  const int windows_in_place =
      gather && xl && !flip && g->ph == 0 && g->pw == 0 && g->eh == 0 && g->ew == 0;
  int64_t seg[kMaxSegments];
  const uint8_t* row_at[kChunk];
  for (int64_t s = 0; gather && s < n_seg; ++s) {
    const int64_t ky = whole_rows ? s : s / g->kw, kx = whole_rows ? 0 : s % g->kw;
    seg[s] = (ky * g->dh * wpad + kx * g->dw) * cb;
  }
  uint8_t* buf = in_place || windows_in_place
                     ? 0
                     : (uint8_t*)ctx->workspace(ctx, (size_t)(hp * wpad * cb + 64));
  uint8_t* rows = direct || gather ? 0 : (uint8_t*)ctx->workspace(ctx, (size_t)(kChunk * kg + 64));
  if ((!in_place && !windows_in_place && !buf) || (!direct && !gather && !rows)) {
    ctx->fail(ctx, "out of memory for an integer convolution's gathered input");
    return 1;
  }
  const uint8_t fill = (uint8_t)(((const uint8_t*)q->az->data)[0] ^ flip);
  int64_t have = -1; /* the image now in buf */
  for (int64_t u = lo; u < hi;) {
    const int64_t img = u / hw, p0 = u % hw;
    /* Chunks bound the copied rows (and the window pointers); a 1x1 stride-1 product reads
     * the image as it is, so one GEMM call takes the part's whole share of it. */
    int64_t p1 = direct || p0 + kChunk >= hw ? hw : p0 + kChunk;
    if (img * hw + p1 > hi) p1 = hi - img * hw;
    if (!in_place && !windows_in_place && have != img) {
      /* The padded rows this part's positions of the image read. */
      const int64_t last = (img + 1) * hw < hi ? hw : hi - img * hw;
      const int64_t r0 = (p0 / g->ow) * g->sh;
      const int64_t r1 = ((last - 1) / g->ow) * g->sh + (g->kh - 1) * g->dh + 1;
      if (xl) {
        kiln_q_pad_rows(px + img * g->h * g->w * C, C, g, r0, r1, fill, flip, buf);
      } else if (c4) {
        kiln_q_widen4(px + img * C * g->h * g->w, g->h * g->w, g, r0, r1, fill, flip, buf);
      } else {
        sup->qnhwc(px + img * C * g->h * g->w, C, g->h * g->w, g, r0, r1, fill, flip, buf);
      }
      have = img;
    }
    for (int64_t gi = 0; gi < group; ++gi) {
      const uint8_t* a = (in_place ? px + img * hw * C : buf) + p0 * cb + gi * cg;
      int64_t lda = cb;
      if (!direct && !gather) {
        sup->qim2row(buf + gi * cg, cp, cb, g, p0, p1, rows, kg);
        a = rows;
        lda = kg;
      }
      if (gather) {
        /* Each position's window from the padded copy (or the unpadded image itself) in
         * place: its first tap's pixel. */
        const uint8_t* im = windows_in_place ? px + img * g->h * g->w * C : buf;
        for (int64_t p = p0; p < p1; ++p)
          row_at[p - p0] = im + (((p / g->ow) * g->sh) * wpad + (p % g->ow) * g->sw) * cb + gi * cg;
      }
      kiln_qgemm_epi e = e0;
      const int8_t* bp = wp + gi * gbytes;
      e.colsum = (const int32_t*)(bp + ((mg + 15) / 16) * ((kg + 3) / 4) * 64);
      e.b_zp += e.b_zp_step * gi * mg;
      if (e.bias) e.bias += gi * mg;
      if (e.scale) e.scale += e.scale_step * gi * mg;
      e.rsc = yl ? M : 1;
      e.csc = yl ? 1 : hw;
      const int64_t at = yl ? (img * hw + p0) * M + gi * mg : (img * M + gi * mg) * hw + p0;
      char* out = (char*)Y->data + at * (int64_t)esize;
      if (gather) {
        sup->qgemm_u8s8_gather(p1 - p0, mg, seg_len, n_seg, row_at, seg, bp, &e, out);
      } else {
        sup->qgemm_u8s8(p1 - p0, mg, kg, a, lda, bp, &e, out);
      }
    }
    if (q->table) {
      /* The chunk's positions, every channel, while they are in cache. */
      uint8_t* done = (uint8_t*)Y->data + (img * hw + p0) * M;
      sup->lut_bytes(done, done, (p1 - p0) * M, q->table);
    }
    u = img * hw + p1;
  }
  return 0;
}

#endif /* KILN_QUANT_H */
