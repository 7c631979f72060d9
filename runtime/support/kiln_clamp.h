/* The clamp the packed GEMM, conv_blocks and conv_tile kernels apply as they store (module_abi.h:
 * kiln_support.gemm_packed): x < lo ? lo : x, then > hi ? hi : x, lane by lane by compare and
 * select, so a NaN fails both tests and stays, as in the scalar relu and clip, and -0.0 is
 * not below 0.0. Each kernel file defines its own vector types per ISA copy, so this makes
 * the function from them. */
#ifndef KILN_CLAMP_H
#define KILN_CLAMP_H

/* NAME(x, lo, hi) over vectors V of T, with VI the integer vector of V's lanes. */
#define KILN_CLAMP_FN(NAME, V, VI, T)                                    \
  static inline __attribute__((always_inline)) V NAME(V x, T lo, T hi) { \
    const V l = (lo) + -(V){0}, h = (hi) + -(V){0};                      \
    VI m = (VI)(x < l);                                                  \
    x = (V)(((VI)l & m) | ((VI)x & ~m));                                 \
    m = (VI)(x > h);                                                     \
    return (V)(((VI)h & m) | ((VI)x & ~m));                              \
  }

/* Whether bounds lo, hi of type T clamp anything: -inf and +inf leave every value, and the
 * kernels then skip the selects. */
#define KILN_CLAMPS_ANY(T, lo, hi) ((lo) > -(T)__builtin_inf() || (hi) < (T)__builtin_inf())

#endif /* KILN_CLAMP_H */
