"""What the recipes read from fairseq-train's logs: the update count and validation loss (progress lines), a
validation metric per epoch (the lla rows' model selection), how training stopped."""
from __future__ import annotations

import re
from typing import Dict


def training_progress(log_path: str, offset: int, last: Dict[str, str]) -> int:
    """Read the training log from offset; keep the latest update count and validation loss in `last`."""
    with open(log_path, errors="replace") as f:
        f.seek(offset)
        for line in f:
            m = re.findall(r"num_updates[ =](\d+)", line)
            if m:
                last["updates"] = m[-1]
            m = re.search(r"valid on 'valid' subset \| loss ([0-9.]+)", line)
            if m:
                last["valid_loss"] = m.group(1)
        return f.tell()


def validation_metric(log_path: str, metric: str = "exact_match") -> Dict[int, float]:
    """epoch -> a validation metric from a fairseq-train log (exact_match: the criterion logs it in validation;
    bleu: fairseq's --eval-bleu)."""
    curve = {}
    with open(log_path, errors="replace") as f:
        for line in f:
            m = re.search(r"\| valid \| epoch (\d+) \|.*\| " + re.escape(metric) + r" ([\d.]+)", line)
            if m:
                curve[int(m.group(1))] = float(m.group(2))
    return curve


def training_summary(log_path: str) -> Dict[str, object]:
    """The last update count, whether fairseq stopped early (--patience) and the device, from a training log."""
    updates, early, device = None, False, "cpu"
    with open(log_path, errors="replace") as f:
        for line in f:
            m = re.findall(r"num_updates[ =](\d+)", line)
            if m:
                updates = int(m[-1])
            if "early stop" in line:
                early = True
            m = re.search(r"capabilities = .*name = (.+)$", line)
            if m:
                device = m.group(1).strip()
    text = f"{updates} updates" if updates is not None else ""
    if early:
        text += " (early stop on validation loss)"
    return {"updates": updates, "early_stop": early, "device": device, "text": text}
