"""kiln.export: a PyTorch model through torch.export into kiln's standalone library, checked
from a C program that links only the library (examples/export/consumer.c) against eager
PyTorch, with weights embedded and beside it; and the errors for what it cannot export."""
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

import kiln

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "export")


class SmallNet(torch.nn.Module):
    """A CNN head and a causal attention block: folding, packing, a mask built from arange."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        h = torch.nn.functional.max_pool2d(h, 2).flatten(2).transpose(1, 2)  # (N, 16, 16)
        n = h.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), 1)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        return self.fc(a + h)


def build(tmp_path, model, x, embed, dynamic_shapes=None):
    out = tmp_path / ("embed" if embed else "file")
    files = kiln.export(model, (x,), out, name="smallnet", embed_weights=embed,
                        dynamic_shapes=dynamic_shapes)
    assert os.path.exists(files["library"]) and os.path.exists(files["header"])
    assert bool(files["weights"]) != embed
    exe = tmp_path / ("consumer_" + ("embed" if embed else "file"))
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-std=c11", os.path.join(EXAMPLES, "consumer.c"), "-o", str(exe),
                    "-DMODEL=smallnet", '-DMODEL_H="smallnet.h"', f"-I{out}", f"-I{EXAMPLES}",
                    f"-L{out}", "-lsmallnet", f"-Wl,-rpath,{out}", "-lm"], check=True)
    return exe


@pytest.mark.parametrize("embed", [True, False])
def test_exported_library_matches_eager_from_c(tmp_path, embed):
    torch.manual_seed(0)
    model = SmallNet().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        want = model(x)
    exe = build(tmp_path, model, x, embed)
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "want.npy", want.numpy())
    run = subprocess.run([str(exe), str(tmp_path / "x.npy"), "--", str(tmp_path / "want.npy")],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "\nOK\n" in run.stdout, run.stdout + run.stderr
    # A planted difference is caught: the consumer is a real check.
    wrong = want.numpy().copy()
    wrong.flat[-1] += 0.01
    np.save(tmp_path / "wrong.npy", wrong)
    run = subprocess.run([str(exe), str(tmp_path / "x.npy"), "--", str(tmp_path / "wrong.npy")],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "MISMATCH" in run.stdout


def test_a_dynamic_batch_from_torch_export_dim_serves_every_batch(tmp_path):
    torch.manual_seed(1)
    model = SmallNet().eval()
    x = torch.randn(3, 3, 8, 8)
    exe = build(tmp_path, model, x, True, {"x": {0: torch.export.Dim("batch", min=2)}})
    readme = open(tmp_path / "embed" / "README.txt").read()
    assert "x: float32 (?, 3, 8, 8)" in readme, readme
    for batch in (2, 5, 3):
        xb = torch.randn(batch, 3, 8, 8)
        with torch.no_grad():
            want = model(xb)
        np.save(tmp_path / "x.npy", xb.numpy())
        np.save(tmp_path / "want.npy", want.numpy())
        run = subprocess.run([str(exe), str(tmp_path / "x.npy"), "--", str(tmp_path / "want.npy")],
                             capture_output=True, text=True)
        assert run.returncode == 0 and "\nOK\n" in run.stdout, run.stdout + run.stderr


def test_ops_kiln_lacks_are_named(tmp_path):
    class Sorts(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x, 1).values * 2

    with pytest.raises(kiln.UnsupportedError, match="kiln does not lower .*sort"):
        kiln.export(Sorts(), (torch.randn(2, 3),), tmp_path / "sorts")


def test_a_training_mode_model_is_told_to_use_eval(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    with pytest.raises(kiln.Error, match="eval"):
        kiln.export(model, (torch.randn(5, 3),), tmp_path / "train")
