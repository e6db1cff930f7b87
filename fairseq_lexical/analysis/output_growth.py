"""How large the authors' attentional output o_t of a `lex_lstm` checkpoint (`--decoder-output combined`) grows
along the target (tools/output_growth.py, examples/scan/width_proxy.py): o_t is linear and fed back into the next step,
so a gain of W's o_t-1 block above 1 compounds geometrically."""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional

import torch


class InputError(Exception):
    """A checkpoint or data-bin directory that cannot be used (named in the message)."""


def output_norms(model, batches: Iterable[dict], pad: int) -> Dict[int, List[float]]:
    """{sample id: [max_i |o_t[i]| for t = 1..T]} (T: the target's length, </s> included), teacher-forced."""
    model.eval()
    out = {}
    with torch.no_grad():
        for sample in batches:
            net = sample["net_input"]
            encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
            o, _ = model.decoder.extract_features(net["prev_output_tokens"], encoder_out)  # B x T x H: o_t
            largest = o.float().abs().amax(-1)
            lengths = sample["target"].ne(pad).sum(-1)
            for i, sample_id in enumerate(sample["id"].tolist()):
                out[sample_id] = largest[i, : int(lengths[i])].tolist()
    return out


def growth_per_step(steps: List[float]) -> Optional[float]:
    """(max|o_T| / max|o_1|)^(1 / (T - 1)): the geometric growth per target position; None for one step or o_1 = 0."""
    return (steps[-1] / steps[0]) ** (1 / (len(steps) - 1)) if len(steps) > 1 and steps[0] > 0 else None


def summarise(norms: Dict[int, List[float]], top: int = 5, every: int = 8) -> dict:
    peaks = sorted((max(v), k) for k, v in norms.items())
    values = [p for p, _ in peaks]

    def quantile(q):
        return values[min(len(values) - 1, int(q * len(values)))]

    worst = []
    for peak, sample_id in reversed(peaks[-top:]):
        steps = norms[sample_id]
        growth = growth_per_step(steps)
        worst.append(
            {"id": sample_id, "length": len(steps), "max": peak, "every": steps[::every], "growth_per_step": growth}
        )
    return {
        "sentences": len(values),
        "median_max": quantile(0.5),
        "p90_max": quantile(0.9),
        "max": values[-1],
        "every": every,
        "worst": worst,
    }
