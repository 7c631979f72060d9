#!/usr/bin/env python3
"""ONNX TfIdfVectorizer on integer tokens against a brute-force NumPy count.

The reference counts, for each pool n-gram and each skip, every window of the row that
equals it (unigrams once, whatever the skip), and applies the weighting by hand; kiln sorts
the pool and binary-searches each window. Cases: TF, IDF and TFIDF with and without weights,
int32 and int64 tokens, a single row and a batch of rows split across threads, skips 0 to 3,
gram lengths 1 to 3, a pool n-gram listed twice (the last column wins), rows shorter than an
n-gram, pool n-grams outside the length range (never counted), negative and huge token
values. Each case runs compiled (tokens a graph input) and folded at load time (tokens an
initializer, through the op's perform). Then bad attributes must fail naming them.

usage: tfidf_test.py KILN_BINARY WORKDIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_cli  # noqa: E402

KILN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
RNG = np.random.default_rng(23)
failures = []


def reference(x, pool, counts, indexes, lo, hi, skip, mode, weights):
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    width = max(indexes) + 1
    grams = []  # (tokens, column) in pool order
    for n in range(1, len(counts) + 1):
        begin = counts[n - 1]
        end = counts[n] if n < len(counts) else len(pool)
        for k in range(begin, end, n):
            grams.append((tuple(pool[k:k + n]), indexes[len(grams)]))
    column = {}
    for g, c in grams:  # a repeated n-gram: the last one's column
        column[g] = c
    out = np.zeros((rows.shape[0], width), np.float32)
    for r, row in enumerate(rows):
        for g, c in column.items():
            n = len(g)
            if not lo <= n <= hi:
                continue
            for s in range(1 if n == 1 else skip + 1):
                step = s + 1
                for i in range(len(row) - (n - 1) * step):
                    if tuple(row[i:i + (n - 1) * step + 1:step]) == g:
                        out[r, c] += 1
    w = np.ones(width, np.float32) if weights is None else np.asarray(weights, np.float32)
    if mode == "IDF":
        out = np.where(out > 0, w, np.float32(0)).astype(np.float32)
    elif mode == "TFIDF":
        out = (out * w).astype(np.float32)
    return out.reshape(-1) if x.ndim == 1 else out


def check(name, x, pool, counts, indexes, lo, hi, skip, mode, weights=None):
    want = reference(x, pool, counts, indexes, lo, hi, skip, mode, weights)
    attrs = dict(min_gram_length=lo, max_gram_length=hi, max_skip_count=skip, mode=mode,
                 pool_int64s=list(pool), ngram_counts=list(counts), ngram_indexes=list(indexes))
    if weights is not None:
        attrs["weights"] = list(weights)
    code = TensorProto.INT32 if x.dtype == np.int32 else TensorProto.INT64
    for folded in (False, True):
        g = helper.make_graph(
            [helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)], name,
            [] if folded else [helper.make_tensor_value_info("x", code, list(x.shape))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(x, "x")] if folded else [])
        label = name + ("_folded" if folded else "")
        path = kiln_cli.write_model(WORK, label, g, [("", 17)])
        r, out = kiln_cli.run(KILN, path, {} if folded else {"x": x})
        if r.returncode != 0:
            failures.append(f"{label}: kiln run failed: {r.stderr.strip()[-500:]}")
            continue
        got = np.load(os.path.join(out, "y.npy"))
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = np.argwhere(got != want)[:3].tolist() if got.shape == want.shape else "shape"
            failures.append(f"{label}: got {got.shape} vs {want.shape}, differing at {bad}")


def expect_error(name, attrs, *needles):
    g = helper.make_graph([helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)], name,
                          [helper.make_tensor_value_info("x", TensorProto.INT64, [6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = kiln_cli.write_model(WORK, name, g, [("", 17)])
    r, _ = kiln_cli.run(KILN, path, {"x": np.arange(6, dtype=np.int64)})
    if r.returncode == 0:
        failures.append(f"{name}: kiln run succeeded; expected an error naming {needles}")
    for n in needles:
        if r.returncode != 0 and n not in r.stderr:
            failures.append(f"{name}: the error does not name {n!r}: {r.stderr.strip()[-300:]}")


# Small vocabularies make matches frequent.
small = RNG.integers(0, 5, size=(7, 40)).astype(np.int64)
pool = [1, 3, 4,  2, 3, 1, 1, 0, 4, 2, 3,  1, 2, 3, 4, 4, 4]
counts = [0, 3, 11]  # 3 unigrams, 4 bigrams, 2 trigrams
indexes = [0, 1, 2, 3, 4, 5, 3, 6, 7]  # the bigram (2, 3) is listed twice: column 3
for mode in ("TF", "IDF", "TFIDF"):
    for skip in (0, 3):
        check(f"batch_{mode}_{skip}", small, pool, counts, indexes, 1, 3, skip, mode)
weights = [0.5, 2.0, -1.0, 3.25, 1.0, 0.0, 7.0, 1.5]
check("weighted_tfidf", small, pool, counts, indexes, 1, 3, 2, "TFIDF", weights)
check("weighted_idf", small.astype(np.int32), pool, counts, indexes, 2, 3, 1, "IDF", weights)
check("only_trigrams_1d", small[0], pool, counts, indexes, 3, 3, 2, "TF")
check("short_rows", small[:, :2].copy(), pool, counts, indexes, 1, 3, 3, "TF")
big = [-(2 ** 62), 2 ** 62, -1]
check("extreme_tokens", np.array([[-(2 ** 62), 2 ** 62, -1, 5, -(2 ** 62), 2 ** 62, -1, -1]],
                                 np.int64),
      big + [-(2 ** 62), 2 ** 62, 2 ** 62, -1], [0, 3], [0, 1, 2, 3, 4], 1, 2, 3, "TF")
# A larger pool, rows past any vector width.
vocab = RNG.integers(0, 30, size=(5, 301)).astype(np.int64)
bigrams = RNG.integers(0, 30, size=(200, 2)).reshape(-1).tolist()
uni = list(range(0, 30, 3))
check("large_pool", vocab, uni + bigrams, [0, len(uni)],
      list(range(len(uni) + 200)), 1, 2, 2, "TF")

expect_error("bad_mode", dict(min_gram_length=1, max_gram_length=1, max_skip_count=0,
                              mode="BM25", pool_int64s=[1], ngram_counts=[0],
                              ngram_indexes=[0]), "mode 'BM25'")
expect_error("bad_counts", dict(min_gram_length=1, max_gram_length=2, max_skip_count=0,
                                mode="TF", pool_int64s=[1, 2, 3], ngram_counts=[0, 2],
                                ngram_indexes=[0, 1, 2]), "2-grams", "[2, 3)")
expect_error("strings", dict(min_gram_length=1, max_gram_length=1, max_skip_count=0,
                             mode="TF", pool_strings=["a"], ngram_counts=[0],
                             ngram_indexes=[0]), "pool_strings")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("tfidf_test: all cases passed")
