#!/usr/bin/env python3
"""Exports the coverage zoo: models whose layers kiln refused before it had transposed
convolutions, reflection padding, grid sampling and short-time Fourier transforms, built here
in PyTorch with seeded random weights (nothing is downloaded), as ONNX files (opset 17) in
bench/data/coverage/ (or --out), like bench/zoo/export.py's zoo (NAME.onnx, NAME.input.npy,
NAME.expected.npy), so bench/zoo/run --zoo coverage cross-checks every tool against PyTorch.

  unet           a U-Net (4 levels from 32 channels, 2x2 stride-2 transposed convolutions up,
                 skip concatenations), 1 x 3 x 256 x 256: segmentation decoders
  dcgan          DCGAN's generator (4x4 stride-2 transposed convolutions, 100 -> 64 x 64), batch 16
  style_transfer Johnson et al.'s transformer net (reflection padding, instance norms, five
                 residual blocks, 3x3 stride-2 transposed convolutions with output_padding),
                 1 x 3 x 256 x 256
  segnet         a SegNet-style encoder-decoder (max pooling that keeps its indices, unpooling
                 by them in the decoder), 1 x 3 x 256 x 256. The unpooling is written as the
                 scatter F.max_unpool2d computes: this torch's TorchScript exporter cannot trace
                 max_unpool2d, and its dynamo exporter writes it as a scatter too (at opset 18)
  stn            a spatial transformer: a localisation CNN, an affine grid and a bilinear
                 grid sample (zero padding), 4 x 3 x 128 x 128
  log_mel        a log-mel spectrogram (torch.stft, 400-point Hann frames every 160 samples, 80
                 mel bands, log), 2 x 5 seconds at 16 kHz: speech models' front-end
  retinanet      torchvision's RetinaNet (ResNet-50 FPN) at 320 x 320, its post-processing
                 exported with it: per-level NonZero and a TopK whose k is min(1000, boxes), a
                 batched NMS; the output is each kept box with its score and label
  fasterrcnn     torchvision's Faster R-CNN (MobileNetV3 FPN, 320): a region proposal network
                 (TopK, NMS), RoIAlign over the proposals and a box head, then per-class NMS
  retinanet_wide, fasterrcnn_wide  the same two on landscape images (300 x 500, 360 x 600) that
                 they resize themselves (to 288 x 480, 240 x 400): a second input size
  scripted_branch a scripted CNN whose forward branches on the data (an ONNX If on a condition
                 computed at run time: one branch a residual block, the other a 1x1
                 projection) and refines with a loop whose trip count the data decides, zero
                 for this input (an ONNX Loop that runs no iteration), 2 x 3 x 64 x 64
  greedy_decoder a scripted GRU decoder that feeds each step's argmax token back in (an ONNX Loop
                 whose trip count comes from the input's shape; its body reads the weights from
                 the enclosing graph), 64 steps for 8 sequences: decoding loops
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402  (seeding rules and the writer shared with the tuned zoo)


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    def __init__(self, base=32, levels=4, classes=2):
        super().__init__()
        chans = [base * 2 ** i for i in range(levels + 1)]
        self.down = nn.ModuleList([conv_block(3, chans[0])] +
                                  [conv_block(chans[i], chans[i + 1]) for i in range(levels)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2)
                                 for i in reversed(range(levels))])
        self.merge = nn.ModuleList([conv_block(2 * chans[i], chans[i])
                                    for i in reversed(range(levels))])
        self.head = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips[:-1])):
            x = merge(torch.cat([up(x), skip], 1))
        return self.head(x)


def unpool(x, idx):
    """F.max_unpool2d(x, idx, 2): each value at its index of a plane twice the size."""
    n, c, h, w = x.shape
    out = x.new_zeros(n, c, 4 * h * w)
    return out.scatter(2, idx.flatten(2), x.flatten(2)).view(n, c, 2 * h, 2 * w)


class SegNet(nn.Module):
    def __init__(self, chans=(32, 64, 128, 256), classes=4):
        super().__init__()
        ins = (3,) + chans[:-1]
        self.enc = nn.ModuleList([conv_block(i, o) for i, o in zip(ins, chans)])
        self.dec = nn.ModuleList([conv_block(o, i if i > 3 else chans[0])
                                  for i, o in reversed(list(zip(ins, chans)))])
        self.head = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        saved = []
        for block in self.enc:
            x, idx = F.max_pool2d(block(x), 2, return_indices=True)
            saved.append(idx)
        for block, idx in zip(self.dec, reversed(saved)):
            x = block(unpool(x, idx))
        return self.head(x)


def dcgan():
    def up(cin, cout, first=False):
        return [nn.ConvTranspose2d(cin, cout, 4, 1 if first else 2, 0 if first else 1, bias=False),
                nn.BatchNorm2d(cout), nn.ReLU()]
    return nn.Sequential(*up(100, 512, True), *up(512, 256), *up(256, 128), *up(128, 64),
                         nn.ConvTranspose2d(64, 3, 4, 2, 1, bias=False), nn.Tanh())


class ConvLayer(nn.Sequential):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__(nn.ReflectionPad2d(k // 2), nn.Conv2d(cin, cout, k, stride))


class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(ConvLayer(c, c, 3), nn.InstanceNorm2d(c, affine=True), nn.ReLU(),
                                  ConvLayer(c, c, 3), nn.InstanceNorm2d(c, affine=True))

    def forward(self, x):
        return x + self.body(x)


def style_transfer():
    def norm(c):
        return nn.InstanceNorm2d(c, affine=True)
    return nn.Sequential(
        ConvLayer(3, 32, 9), norm(32), nn.ReLU(),
        ConvLayer(32, 64, 3, 2), norm(64), nn.ReLU(),
        ConvLayer(64, 128, 3, 2), norm(128), nn.ReLU(),
        *[Residual(128) for _ in range(5)],
        nn.ConvTranspose2d(128, 64, 3, 2, 1, output_padding=1), norm(64), nn.ReLU(),
        nn.ConvTranspose2d(64, 32, 3, 2, 1, output_padding=1), norm(32), nn.ReLU(),
        ConvLayer(32, 3, 9))


class STN(nn.Module):
    """The affine grid is built from matrix products (ONNX's AffineGrid needs opset 20)."""

    def __init__(self, size=128):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(3, 8, 7), nn.MaxPool2d(2), nn.ReLU(),
                                 nn.Conv2d(8, 10, 5), nn.MaxPool2d(2), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(160, 32),
                                 nn.ReLU(), nn.Linear(32, 6))
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size),
                                indexing="ij")
        self.register_buffer("base", torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(-1, 3))
        self.size = size

    def forward(self, x):
        # Near the identity, so the sampled image is mostly inside the input.
        theta = torch.tensor([[1., 0, 0], [0, 1., 0]]) + 0.2 * torch.tanh(self.loc(x)).view(-1, 2, 3)
        grid = (self.base @ theta.transpose(1, 2)).view(-1, self.size, self.size, 2)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class LogMel(nn.Module):
    def __init__(self, n_fft=400, hop=160, mels=80, rate=16000):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("mel", mel_filters(n_fft, mels, rate))

    def forward(self, audio):
        spec = torch.stft(audio, self.n_fft, self.hop, window=self.window, center=False,
                          return_complex=False)
        power = spec.pow(2).sum(-1)                      # (batch, bins, frames)
        mel = self.mel @ power                           # (batch, mels, frames)
        return torch.log(mel.clamp(min=1e-10))


class GreedyDecoder(nn.Module):
    """A GRU cell written out (TorchScript's exporter has no rule for a scripted nn.GRUCell),
    an embedding of the previous token and a vocabulary projection; returns the last state."""
    def __init__(self, vocab=2000, hidden=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.wi, self.wh = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, h):
        tok = torch.zeros(h.size(0), dtype=torch.long)
        for _ in range(h.size(0) * 8):
            ir, iz, inn = self.wi(self.embed(tok)).chunk(3, 1)
            hr, hz, hn = self.wh(h).chunk(3, 1)
            r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
            h = (1 - z) * torch.tanh(inn + r * hn) + z * h
            tok = self.out(h).argmax(-1)
        return h


class Detector(nn.Module):
    """A torchvision detector on one image, its detections as one (N, 6) tensor: the box,
    the score and the label. Random weights would score every box alike (the heads start at
    a uniform prior), so the heads are drawn again, wider, to rank the boxes apart."""
    def __init__(self, make, spread):
        super().__init__()
        self.net = make()
        g = torch.Generator().manual_seed(3)
        for name, p in self.net.named_parameters():
            if "head" in name or "predictor" in name:
                p.data.normal_(0, spread if p.dim() > 1 else 0.1, generator=g)

    def forward(self, x):
        out = self.net([x[0]])[0]
        return torch.cat([out["boxes"], out["scores"][:, None], out["labels"][:, None].float()], 1)


def detector(name, spread, min_size=320, max_size=320):
    """`spread`: the heads' weights' deviation, wide enough that the scores differ (and ties do
    not decide which boxes survive), narrow enough that sigmoid scores stay below 1.
    min_size, max_size: the detector's own resize of its input (torchvision's transform)."""
    import torchvision.models.detection as det
    make = {
        "ssdlite": lambda: det.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None),
        "retinanet": lambda: det.retinanet_resnet50_fpn(weights=None, weights_backbone=None,
                                                         min_size=min_size, max_size=max_size),
        "fasterrcnn": lambda: det.fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, box_score_thresh=0.0, min_size=min_size,
            max_size=max_size),
    }[name]
    return lambda: Detector(make, spread)


class ScriptedBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.block = conv_block(16, 16)
        self.proj = nn.Conv2d(16, 16, 1)
        self.refine = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        if bool(h.mean() > 0.1):
            h = h + self.block(h)
        else:
            h = self.proj(h)
        # Refinement steps decided by the data: none unless the activations run large.
        for _ in range(int(h.abs().max() > 1000.0) * 3):
            h = torch.tanh(self.refine(h))
        return h


def scripted_branch():
    return torch.jit.script(ScriptedBranch())


def greedy_decoder():
    return torch.jit.script(GreedyDecoder())


def mel_filters(n_fft, mels, rate):
    """Slaney-style triangular filters (mels x bins), as Whisper's front-end has them."""
    bins = n_fft // 2 + 1
    def hz_to_mel(f):
        return 2595 * math.log10(1 + f / 700)
    pts = torch.linspace(hz_to_mel(0), hz_to_mel(rate / 2), mels + 2)
    hz = 700 * (10 ** (pts / 2595) - 1)
    freqs = torch.linspace(0, rate / 2, bins)
    lower = (freqs[None, :] - hz[:-2, None]) / (hz[1:-1, None] - hz[:-2, None])
    upper = (hz[2:, None] - freqs[None, :]) / (hz[2:, None] - hz[1:-1, None])
    return torch.clamp(torch.minimum(lower, upper), min=0)


def image(batch, size=256):
    return lambda: torch.randn(batch, 3, size, size)


# name -> (constructor, input maker, input name, dynamic axes of the input or None)
MODELS = {
    "unet": (UNet, image(1), "input", None),
    "dcgan": (dcgan, lambda: torch.randn(16, 100, 1, 1), "input", None),
    "style_transfer": (style_transfer, image(1), "input", None),
    "segnet": (SegNet, image(1), "input", None),
    "stn": (STN, image(4, 128), "input", None),
    "log_mel": (LogMel, lambda: torch.randn(2, 80000) * 0.1, "audio", None),
    "retinanet": (detector("retinanet", 0.005), lambda: torch.rand(1, 3, 320, 320), "image", None),
    "fasterrcnn": (detector("fasterrcnn", 0.2), lambda: torch.rand(1, 3, 320, 320), "image", None),
    # The same two families on a landscape image the detector resizes itself (to 288 x 480 and
    # 240 x 400): other feature-map sizes, anchor grids and proposal counts than the square's.
    "retinanet_wide": (detector("retinanet", 0.005, 288, 480), lambda: torch.rand(1, 3, 300, 500),
                       "image", None),
    "fasterrcnn_wide": (detector("fasterrcnn", 0.2, 240, 400), lambda: torch.rand(1, 3, 360, 600),
                        "image", None),
    "scripted_branch": (scripted_branch, lambda: torch.rand(2, 3, 64, 64), "image", None),
    "greedy_decoder": (greedy_decoder, lambda: torch.randn(8, 256), "state", None),
}


# Models whose output may differ from PyTorch's at this share of its elements (for every tool):
# RetinaNet's detections are sorted by score, and a few of its random-weight scores are closer
# than the convolutions' rounding, so a few rows swap places (as a set they agree); so do two
# of the wide Faster R-CNN's, whose scores agree to 5 digits. SegNet's
# unpooling puts each value where its window's maximum was, and two candidates closer than the
# convolutions' rounding can win differently. kiln's indices equal numpy's first maximum on
# equal inputs (tests/reference/make_cases.py's max_pool_indices cases); onnxruntime, whose
# convolutions round as PyTorch's here, happens to pick the same.
FLIPS = {"segnet": 1e-4, "retinanet": 0.02, "retinanet_wide": 0.02, "fasterrcnn_wide": 0.02}


def build(name):
    """The seeded PyTorch model and input behind NAME.onnx."""
    return export.zoo_build(MODELS, name)


if __name__ == "__main__":
    export.zoo_main(MODELS, "coverage", __doc__)
