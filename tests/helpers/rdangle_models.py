"""Tiny `rdangle_transformer` models for the R-Dangle tests: the toy pairs, a tiny model with random relative tables
(the authors' tables start at zero, so they would not count in a test)."""

import torch

from tests.helpers.models import build_model

PAIRS = [("a1 twice and a2", "B1 B1 B2"), ("a3", "B3"), ("a4 and a5 twice", "B4 B5 B5"), ("a6 and a1", "B6 B1")]


def randomize_relative_tables(model):
    """The authors' relative tables start at zero (relative_attention); random ones make them count in a test."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("relative_embeddings"):
                p.normal_(0, p.size(-1) ** -0.5)
    return model


def tiny_rdangle(data, *extra, seed=0):
    torch.manual_seed(seed)
    model, task, args = build_model(data, "--arch", "rdangle_transformer_tiny", "--dropout", "0", *map(str, extra))
    return randomize_relative_tables(model), task, args
