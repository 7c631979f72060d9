"""The Python benchmarks' one timer (the median of n calls) and the machine they ran on."""
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


def cpu_name():
    """The CPU's model name, for a results file's header."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"
