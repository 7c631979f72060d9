import os
import tempfile

import pytest

# A kernel cache of the test run's own (ctest passes KILN_CACHE_DIR; standalone runs get one).
if "KILN_CACHE_DIR" not in os.environ:
    os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-pytest-cache-")

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


@pytest.fixture
def examples():
    return os.path.abspath(EXAMPLES)
