"""The kernel cache compile() uses ($KILN_CACHE_DIR, else ~/.cache/kiln), as `kiln cache`
shows it. Each function takes dir= to look at another cache folder."""
from . import _kiln


def root():
    """The cache folder compile() uses."""
    return _kiln.cache_root()


def stats(dir=None):
    """Entries, bytes, hits, misses, compiles and kernel counts (a dict)."""
    return _kiln.cache_stats(dir)


def ls(dir=None):
    """One dict per entry: key, label, family, size, created, last_used, compile_ms, hits."""
    return _kiln.cache_ls(dir)


def verify(dir=None):
    """Checks every entry's hashes and signature; bad ones move to quarantine/.
    Returns {"good": n, "bad": ["key: problem", ...]}."""
    return _kiln.cache_verify(dir)


def gc(max_size=None, max_age_s=None, dir=None):
    """Evicts least-recently-used entries down to max_size bytes and max_age_s seconds of
    age (defaults: the cache's limit); entries a live process uses stay."""
    return _kiln.cache_gc(max_size, max_age_s, dir)
