"""torch.compile(backend="kiln") on the real models of bench/python/torch_models.py (timm and
transformers, built from their configs with seeded weights): each becomes exactly one kiln graph,
with no op left to PyTorch and every weight frozen, and matches eager PyTorch."""
import os
import sys
import warnings

import pytest
import torch

pytest.importorskip("timm")
pytest.importorskip("transformers")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "python"))
import torch_models  # noqa: E402

from kiln import torch_backend  # noqa: E402


@pytest.mark.parametrize("name", sorted(torch_models.MODELS))
def test_model_is_one_kiln_graph_and_matches_eager(name):
    torch.set_num_threads(2)
    model, x = torch_models.export.seeded(*torch_models.MODELS[name])
    torch._dynamo.reset()
    reports = len(torch_backend.REPORTS)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no op or part falls back to PyTorch
        want = model(x)
        got = torch.compile(model, backend="kiln")(x)
    (report,) = torch_backend.REPORTS[reports:]
    assert report["kiln_graphs"] == 1 and report["pytorch_ops"] == [], report
    assert report["frozen"] > 0, report
    assert torch_models.rel_error(got, want) <= 1e-4
