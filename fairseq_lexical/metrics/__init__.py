"""Evaluation helpers (no fairseq import): reading fairseq-generate output and the papers' metrics."""
from .generate_output import GenerateOutputError, read_generate_output
from .scores import exact_match

__all__ = ["GenerateOutputError", "exact_match", "read_generate_output"]
