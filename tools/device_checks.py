#!/usr/bin/env python
"""What a GPU campaign's `start` asks the device before anything depends on it (docs/gpu.md): each check prints one
JSON line, and fails (exit status 1, the traceback) where the device cannot do what it checks.

    python tools/device_checks.py packages      # every distribution this Python imports: [[name, version], ...]
    python tools/device_checks.py environment   # Python, torch, fairseq, the GPU, where fairseq_lexical comes from
    python tools/device_checks.py decoder       # a tiny lex_lstm trains one step on the device (CUDA where there is
                                                # one), and whether torch's fused LSTM cell kernel ran

`packages` needs nothing but the standard library (start asks the device's own Python, before it installs what that
lacks); the other two run in the campaign's environment (fairseq_lexical_recipes.campaign.processes.run_env).
"""

from __future__ import annotations

import argparse
import json
import sys


def packages() -> list:
    from importlib import metadata

    return [(d.metadata["Name"], d.version) for d in metadata.distributions()]


def environment() -> dict:
    import fairseq
    import fairseq_cli.train  # noqa: F401  (what the runs' fairseq-train imports)
    import torch

    import fairseq_lexical
    import fairseq_lexical_recipes.cli  # noqa: F401  (what the runs' recipe processes import)

    cuda = torch.cuda.is_available()
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "fairseq": fairseq.__version__,
        "cuda": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else "cpu (no CUDA device)",
        "gpus": torch.cuda.device_count(),
        "fairseq_lexical": fairseq_lexical.__file__,
    }


def decoder() -> dict:
    """One training step of a 2-layer lex_lstm of 8 units, its outputs and gradients finite; on CUDA, whether the
    fused LSTM cell kernel is still in use after it (it turns itself off at its first refusal)."""
    import torch
    from fairseq.data import Dictionary

    from fairseq_lexical.models.lex_lstm import LexLSTMDecoder, LexLSTMEncoder

    d = Dictionary()
    for w in "a b c".split():
        d.add_symbol(w)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    enc = LexLSTMEncoder(
        d, embed_dim=8, hidden_size=8, num_layers=2, dropout_in=0.1, dropout_out=0.1, bidirectional=False
    ).to(dev)
    dec = LexLSTMDecoder(
        d,
        embed_dim=8,
        hidden_size=8,
        out_embed_dim=8,
        num_layers=2,
        dropout_in=0.1,
        dropout_out=0.1,
        encoder_output_units=8,
    )
    dec.use_combined_output()
    dec.lexical_head = None
    dec.to(dev).train()
    src, prev = torch.tensor([[4, 5, 6, 2]], device=dev), torch.tensor([[2, 4, 5]], device=dev)
    out, _ = dec(prev, enc(src, torch.tensor([4], device=dev)))
    out.sum().backward()
    grads = [p.grad for p in dec.parameters() if p.grad is not None]
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    fused = False
    if dev == "cuda":  # the kernel is CUDA's: on a CPU the question does not arise
        from fairseq_lexical.modules.fused_lstm_cell import fused_lstm_cell_usable

        fused = fused_lstm_cell_usable()
    return {"decoder_check": "ok on " + dev, "fused_lstm_cell": fused}


CHECKS = {"packages": packages, "environment": environment, "decoder": decoder}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=list(CHECKS))
    args = parser.parse_args(argv)
    print(json.dumps(CHECKS[args.check]()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
