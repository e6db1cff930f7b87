"""What the recipes read from fairseq-train's logs: the update count and validation loss (progress lines), a
validation metric per epoch (the lla rows' model selection), how training stopped.

The recipes train with --log-format json: each progress record is one line `DATE | INFO | TAG | {json}`, TAG the
logger name fairseq gives it: "train_inner" every --log-interval updates ({"epoch": 1, "update": 0.5, "loss": "4.1",
..., "num_updates": "10"}), "train" at the end of an epoch and "valid" after a validation (their keys prefixed with
the tag: "train_loss", "valid_exact_match", "valid_num_updates"; "epoch" an int, values formatted as strings).
Logs of --log-format simple (runs made before the recipes switched, examples/cat_oci) are read into the same shape."""

from __future__ import annotations

import json
import os
import re
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

Record = Tuple[str, Dict[str, object]]
_TAGS = re.compile(r"train_inner|train|valid\w*")
_SIMPLE_INNER = re.compile(r"epoch (\d+):\s+\d+ / \d+ (.*)")  # epoch 002:      4 / 6 loss=2.316, num_updates=10


def records(lines: Iterable[str]) -> Iterator[Record]:
    """(tag, stats) for each progress record among a fairseq-train log's lines, in the --log-format json shape."""
    for line in lines:
        parts = line.rstrip("\n").split(" | ", 3)
        if len(parts) < 4 or not _TAGS.fullmatch(parts[2]):
            continue
        tag, message = parts[2], parts[3]
        if message.startswith("{"):
            try:
                stats = json.loads(message)
            except ValueError:  # a line cut short (the run was killed while writing it)
                continue
            if isinstance(stats, dict):
                yield tag, stats
            continue
        stats = _simple_record(tag, message)
        if stats:
            yield tag, stats


def _simple_record(tag: str, message: str) -> Dict[str, object]:
    """A --log-format simple record as its json twin: `epoch 005 | valid on 'valid' subset | loss 0.99 | ...`
    (end of epoch, validation) or `epoch 002:   4 / 6 loss=2.3, ...` (train_inner)."""
    m = _SIMPLE_INNER.fullmatch(message)
    if m and tag == "train_inner":
        pairs = [item.split("=", 1) for item in m.group(2).split(", ") if "=" in item]
        return {"epoch": int(m.group(1)), **{k: v for k, v in pairs}}
    items = message.split(" | ")
    m = re.fullmatch(r"epoch (\d+)", items[0])
    if not m or tag == "train_inner":
        return {}
    stats: Dict[str, object] = {"epoch": int(m.group(1))}
    for item in items[1:]:
        kv = item.split(" ")
        if len(kv) == 2:  # not the prefix "valid on 'valid' subset"
            stats[f"{tag}_{kv[0]}"] = kv[1]
    return stats


def read_records(log_path: str) -> Iterator[Record]:
    with open(log_path, errors="replace") as f:
        yield from records(f)


def updates_of(tag: str, stats: Dict[str, object]):
    """The record's update count (num_updates, train_num_updates, valid_num_updates), or None."""
    value = stats.get("num_updates" if tag == "train_inner" else f"{tag}_num_updates")
    return None if value is None else int(float(value))


def training_progress(log_path: str, offset: int, last: Dict[str, str]) -> int:
    """Read the training log's complete lines from byte offset; keep the latest update count and validation loss in
    `last`. Returns the offset of the first line not read."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        data = f.read()
    complete = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
    for tag, stats in records(complete.decode("utf-8", "replace").splitlines()):
        updates = updates_of(tag, stats)
        if updates is not None:
            last["updates"] = str(updates)
        if tag == "valid" and "valid_loss" in stats:
            last["valid_loss"] = str(stats["valid_loss"])
    return offset + len(complete)


def validation_metric(log_path: str, metric: str = "exact_match") -> Dict[int, float]:
    """epoch -> a validation metric from a fairseq-train log (exact_match: the criterion logs it in validation;
    bleu: fairseq's --eval-bleu)."""
    return {
        int(stats["epoch"]): float(stats[f"valid_{metric}"])
        for tag, stats in read_records(log_path)
        if tag == "valid" and f"valid_{metric}" in stats and "epoch" in stats
    }


def training_summary(log_path: str) -> Dict[str, object]:
    """The last update count, whether fairseq stopped early (--patience) and the device, from a training log."""
    updates, early, device = None, False, "cpu"
    with open(log_path, errors="replace") as f:
        for line in f:
            for tag, stats in records([line]):
                n = updates_of(tag, stats)
                updates = updates if n is None else n
            if "early stop" in line:  # fairseq's own log lines (not progress records)
                early = True
            m = re.search(r"capabilities = .*name = (.+)$", line)
            if m:
                device = m.group(1).strip()
    text = f"{updates} updates" if updates is not None else ""
    if early:
        text += " (early stop on validation loss)"
    return {"updates": updates, "early_stop": early, "device": device, "text": text}


def finished_training_seconds(log_path: str) -> Optional[float]:
    """The seconds fairseq-train reported when it ended its training normally ("done training in X seconds": the
    last such line of a log that resumed), or None where it never did (or there is no log)."""
    seconds = None
    if not os.path.isfile(log_path):
        return None
    with open(log_path, errors="replace") as f:
        for line in f:
            m = re.search(r"\| done training in ([\d.]+) seconds", line)
            if m:
                seconds = float(m.group(1))
    return seconds


def last_valid_p_gate(log_path: str) -> Optional[float]:
    """The last validation's mean p_gate (the lexical head's weight of p_write) in a fairseq-train log of either
    format; None where none is logged (a model without the head)."""
    value = None
    for tag, stats in read_records(log_path):
        if tag == "valid" and "valid_p_gate" in stats:
            value = float(stats["valid_p_gate"])
    return value


def validation_history(log_path: str) -> List[Dict[str, object]]:
    """Every validation of a fairseq-train log, in order: {"updates", "loss", "exact_match"} (exact_match None
    where the criterion does not log it)."""
    points = []
    for tag, stats in read_records(log_path):
        if tag == "valid" and "valid_loss" in stats:
            em = stats.get("valid_exact_match")
            points.append(
                {
                    "updates": updates_of(tag, stats),
                    "loss": float(stats["valid_loss"]),
                    "exact_match": None if em is None else float(em),
                }
            )
    return points
