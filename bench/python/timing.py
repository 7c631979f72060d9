"""The Python benchmarks' one timer: the median of n calls."""
import statistics
import time


def median_seconds(fn, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def median_ms(fn, n):
    return median_seconds(fn, n) * 1e3
