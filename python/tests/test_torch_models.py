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


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_transformer_with_dynamic_batch_and_sequence_is_one_module(name):
    torch.set_num_threads(2)
    model, x = torch_models.export.seeded(*torch_models.MODELS[name])
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln", dynamic=True)
    reports = len(torch_backend.REPORTS)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for batch, length in ((2, 16), (3, 37), (2, 64)):
            ids = torch.randint(0, 1000, (batch, length), generator=g)
            assert torch_models.rel_error(compiled(ids), model(ids)) <= 1e-4
    (report,) = torch_backend.REPORTS[reports:]  # one compile for the three sizes
    assert report["dynamic"] and report["kiln_graphs"] == 1 and report["pytorch_ops"] == [], report


def test_cnn_with_a_marked_dynamic_batch_is_one_module():
    torch.set_num_threads(2)
    model, x = torch_models.export.seeded(*torch_models.MODELS["resnet50"])
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln")
    reports = len(torch_backend.REPORTS)
    with torch.no_grad():
        for batch in (2, 3, 4):
            images = torch.randn(batch, 3, 96, 96)
            torch._dynamo.mark_dynamic(images, 0)
            assert torch_models.rel_error(compiled(images), model(images)) <= 1e-4
    (report,) = torch_backend.REPORTS[reports:]
    assert report["dynamic"] and report["kiln_graphs"] == 1 and report["pytorch_ops"] == [], report
