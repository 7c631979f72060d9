import os
import tempfile

import pytest

# A kernel cache of the test run's own (ctest passes KILN_CACHE_DIR; standalone runs get one).
if "KILN_CACHE_DIR" not in os.environ:
    os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-pytest-cache-")

# The CUDA backend's tests run on kiln's CUDA emulator where no GPU is at hand (chosen once per
# process, so before any test touches the device).
if "KILN_CUDA_DEVICE" not in os.environ and not os.path.exists("/dev/nvidia0"):
    os.environ["KILN_CUDA_DEVICE"] = "emulator"

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


@pytest.fixture
def examples():
    return os.path.abspath(EXAMPLES)
