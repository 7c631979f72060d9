#!/usr/bin/env python3
"""Exports the broad zoo: architectures nobody tuned kiln for, from timm and HuggingFace
transformers, built from their configurations with seeded random weights (nothing is
downloaded), as ONNX files (opset 17) in bench/data/broad/ (or --out).

The families users deploy: timm CNNs (ResNet, ResNeXt, RegNet, EfficientNet and EfficientNetV2,
MobileNetV3, ConvNeXt, DenseNet, GhostNet), vision transformers and hybrids (DeiT, ViT, Swin,
MobileViT, LeViT, EdgeNeXt) and HuggingFace encoders and decoders (BERT, DistilBERT, RoBERTa,
GPT-2 with its LM head, a Llama-style decoder, a T5 encoder); small and large, batch 1 and 8,
and some with dynamic axes (NAME carries `_dyn`: the export leaves the batch, or the batch and
the sequence, free, and the file is run at the size of NAME.input.npy).

Each model is written as NAME.onnx, NAME.input.npy (a seeded input) and NAME.expected.npy
(PyTorch's output for it), like bench/zoo/export.py's zoo, so bench/zoo/run --zoo broad
cross-checks every tool against PyTorch. Needs timm and transformers beside PyTorch in the
benchmark environment (bench/zoo/run --zoo broad installs them).
"""
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402  (seeding rules shared with the tuned zoo)


def timm_model(name, **kw):
    def make():
        import timm
        return timm.create_model(name, pretrained=False, **kw)
    return make


class Logits(nn.Module):
    """A HuggingFace model called on token ids alone, returning its first output (logits or
    the last hidden state) as a plain tensor; a decoder keeps no cache and sees a mask of ones
    (without one, transformers looks for packed sequences through aten::diff, which the
    exporter lacks)."""

    def __init__(self, model, decoder):
        super().__init__()
        self.model = model
        self.extra = {"use_cache": False} if decoder else {}

    def forward(self, ids):
        mask = {"attention_mask": torch.ones_like(ids)} if self.extra else {}
        return self.model(input_ids=ids, return_dict=False, **self.extra, **mask)[0]


def hf_model(kind, attention="eager", **cfg):
    """A transformers model of KIND built from CFG. attention="eager": the plain attention the
    exporter writes out as MatMul and Softmax, as a deployment export of these models does;
    None keeps the library's default (scaled_dot_product_attention), as a PyTorch user has it.
    KIND gpt2_model / llama_model: the bare decoder (GPT2Model, LlamaModel), no LM head."""
    def make():
        import transformers as tf
        config_class, model_class = {
            "bert": (tf.BertConfig, tf.BertModel),
            "distilbert": (tf.DistilBertConfig, tf.DistilBertModel),
            "roberta": (tf.RobertaConfig, tf.RobertaModel),
            "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel),
            "gpt2_model": (tf.GPT2Config, tf.GPT2Model),
            "llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
            "llama_model": (tf.LlamaConfig, tf.LlamaModel),
            "t5": (tf.T5Config, tf.T5EncoderModel),
        }[kind]
        config = config_class(**cfg)
        if attention is not None:
            config._attn_implementation = attention
        return Logits(model_class(config), kind.startswith(("gpt2", "llama")))
    return make


def image(batch, size=224):
    return lambda: torch.randn(batch, 3, size, size)


def tokens(batch, length, vocab):
    return lambda: torch.randint(0, vocab, (batch, length))


BERT = dict(hidden_size=768, num_hidden_layers=4, num_attention_heads=12, intermediate_size=3072)
GPT2 = dict(n_embd=768, n_layer=4, n_head=12, n_positions=1024)
LLAMA = dict(vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024)
T5 = dict(d_model=512, d_ff=2048, d_kv=64, num_layers=4, num_heads=8)
# A small encoder (BERT-mini's shape, 30522-word vocabulary), for models under 2 ms.
BERT_MINI = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
IMAGE_AXES = {0: "batch"}
TOKEN_AXES = {0: "batch", 1: "sequence"}

# name -> (constructor, input maker, input name, dynamic axes of the input or None)
MODELS = {
    # timm CNNs
    "resnet50": (timm_model("resnet50"), image(1), "input", None),
    "resnet50_b8": (timm_model("resnet50"), image(8), "input", None),
    "resnet50_dyn": (timm_model("resnet50"), image(2), "input", IMAGE_AXES),
    "resnext50": (timm_model("resnext50_32x4d"), image(1), "input", None),
    "regnety_008": (timm_model("regnety_008"), image(1), "input", None),
    "efficientnet_b1": (timm_model("efficientnet_b1"), image(1, 240), "input", None),
    "efficientnetv2_b0": (timm_model("tf_efficientnetv2_b0"), image(1), "input", None),
    "mobilenetv3_large": (timm_model("mobilenetv3_large_100"), image(1), "input", None),
    "mobilenetv3_large_b8": (timm_model("mobilenetv3_large_100"), image(8), "input", None),
    "convnext_tiny": (timm_model("convnext_tiny"), image(1), "input", None),
    "densenet121": (timm_model("densenet121"), image(1), "input", None),
    "ghostnet": (timm_model("ghostnet_100"), image(1), "input", None),
    "mobilenetv3_small": (timm_model("mobilenetv3_small_075"), image(1), "input", None),
    # vision transformers and hybrids
    "deit_tiny": (timm_model("deit_tiny_patch16_224"), image(1), "input", None),
    "deit_tiny_b8": (timm_model("deit_tiny_patch16_224"), image(8), "input", None),
    "vit_base": (timm_model("vit_base_patch16_224"), image(1), "input", None),
    "swin_tiny": (timm_model("swin_tiny_patch4_window7_224"), image(1), "input", None),
    "mobilevit_xs": (timm_model("mobilevit_xs"), image(1, 256), "input", None),
    "levit_128s": (timm_model("levit_128s"), image(1), "input", None),
    "edgenext_small": (timm_model("edgenext_small"), image(1, 256), "input", None),
    # HuggingFace encoders and decoders
    "bert": (hf_model("bert", **BERT), tokens(1, 128, 30522), "ids", None),
    "bert_b8": (hf_model("bert", **BERT), tokens(8, 128, 30522), "ids", None),
    "bert_dyn": (hf_model("bert", **BERT), tokens(2, 64, 30522), "ids", TOKEN_AXES),
    "distilbert": (hf_model("distilbert", n_layers=6), tokens(1, 128, 30522), "ids", None),
    "roberta": (hf_model("roberta", **BERT), tokens(1, 128, 50265), "ids", None),
    "gpt2": (hf_model("gpt2", **GPT2), tokens(1, 128, 50257), "ids", None),
    "llama": (hf_model("llama", **LLAMA), tokens(1, 128, 32000), "ids", None),
    "t5_encoder": (hf_model("t5", **T5), tokens(1, 128, 32128), "ids", None),
    "bert_mini": (hf_model("bert", **BERT_MINI), tokens(1, 64, 30522), "ids", None),
}


def build(name):
    """The seeded PyTorch model and input behind NAME.onnx."""
    return export.zoo_build(MODELS, name)


if __name__ == "__main__":
    export.zoo_main(MODELS, "broad", __doc__)
