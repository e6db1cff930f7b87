"""A campaign's state directory on the device and what a run's record goes through: start writes it, the scheduler
keeps it, poll reads it. One `stop` says what a stop does to a run's record, whoever stops it.

State directory (default /tmp/fairseq_lexical_campaign, outside the checkout that each device call re-copies):
    campaign.json    what start found and decided (plan, GPU, deadline's origin, options)
    deadline.json    the time the runs must be over by (start sets it, `poll --budget-s` moves it)
    runs.json        every run's record (plan.RunRecord), written by the scheduler only (poll after it has ended)
    scheduler.json   the scheduler's status and phase, measured rates, chosen concurrency, preparations, heartbeat
    site/ src/ data/ the installed wheels, the code, the data;  work/<group>/ the recipes' work directories
    logs/            one log per run and per preparation;  scheduler.log
    stops/<run id>   a run asked to stop at its next step boundary (the reason): its FAIRSEQ_LEXICAL_STOP_FILE
    stop             (made by hand) stops the whole campaign
    mps/             CUDA MPS's pipe and log folders, while it runs
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from typing import List, Optional, Sequence

from fairseq_lexical_recipes.campaign.plan import RunRecord, RunStatus, Word
from fairseq_lexical_recipes.textio import read_json, write_json

DEFAULT_STATE = "/tmp/fairseq_lexical_campaign"
MARKER = "campaign.json"


def log(*parts) -> None:
    """A line of the campaign's own output (start's, poll's, the scheduler's scheduler.log), timed."""
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def tail(path: str, lines: int = 30) -> str:
    """The end of a log, or why there is none."""
    if not os.path.isfile(path):
        return f"({path} does not exist)"
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:]) or f"({path} is empty)\n"


class SchedulerStatus(Word):
    STARTING = "starting"  # written by start, until the scheduler's first tick
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"  # the scheduler crashed (it stopped its runs first)


class PrepStatus(Word):
    WAITING = "waiting"
    PREPARING = "preparing"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass
class Preparation:
    """A group's data, lexicons and data-bin, prepared once before its runs (scheduler.json's "prepared")."""

    status: PrepStatus = PrepStatus.WAITING
    pgid: Optional[int] = None
    started: Optional[float] = None
    seconds: Optional[float] = None
    tokens_per_pair: Optional[float] = None  # what one update costs, roughly
    test_sentences: Optional[int] = None  # what decoding costs

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_json(cls, d: dict) -> "Preparation":
        prep = cls(**d)
        prep.status = PrepStatus(prep.status)
        return prep


def read_runs(state: str) -> List[RunRecord]:
    return [RunRecord.from_json(r) for r in read_json(f"{state}/runs.json")["runs"]]


def write_runs(state: str, runs: Sequence[RunRecord]) -> None:
    write_json(f"{state}/runs.json", {"runs": [r.to_json() for r in runs]})


def read_campaign(state: str) -> dict:
    return read_json(f"{state}/{MARKER}")


def read_scheduler(state: str) -> dict:
    return read_json(f"{state}/scheduler.json") if os.path.isfile(f"{state}/scheduler.json") else {}


def read_deadline(state: str) -> float:
    return float(read_json(f"{state}/deadline.json")["deadline"])


def set_deadline(state: str, deadline: float, why: str) -> None:
    write_json(f"{state}/deadline.json", {"deadline": deadline, "set": time.time(), "why": why})


def run_log(state: str, run_id: str) -> str:
    """The log of the recipe process started for a run (that of a replica batch is its first run's)."""
    return f"{state}/logs/{run_id}.log"


# -- a run's record ---------------------------------------------------------------------------------------------------
def stop_request(cause: str) -> str:
    """What a stop of every run asks each running run (the reason its stop file holds, and its record's)."""
    return f"stopped by {cause}"


def stop(record: RunRecord, cause: str, log_tail: Optional[str] = None) -> bool:
    """What a stop of the campaign (at the deadline, by a stop request, by a poll or a new start) does to a run's
    record, whoever records it (the scheduler, or poll where the scheduler no longer answers): a running run is
    stopped ("stopped by" the cause, the end of its log), a queued run skipped ("not started before" the cause); a run
    already over keeps its record. Returns whether the record changed."""
    if record.status is RunStatus.RUNNING:
        stopped(record, stop_request(cause), log_tail)
    elif record.status is RunStatus.QUEUED:
        record.status, record.reason = RunStatus.SKIPPED, f"not started before {cause}"
    else:
        return False
    return True


def stopped(record: RunRecord, reason: str, log_tail: Optional[str], ended: Optional[float] = None) -> None:
    """A running run's record once it left on a stop request (``reason``, what the request said), or was signalled
    after it: stopped, with the end of its log and, where known, when it ended."""
    record.status, record.reason, record.eta_s, record.log_tail = RunStatus.STOPPED, reason, None, log_tail
    if ended is not None:
        record.ended = ended


def score_text(r: RunRecord) -> str:
    """A finished run's score in a line, with its last validation on the held-out training pairs."""
    score = r.score or {}
    last = (r.validation or {}).get("last") or {}
    held_out = f" (validation loss {last['loss']:.3g}" if last else ""
    if last.get("exact_match") is not None:
        held_out += f", exact match {last['exact_match']:.3f}"
    held_out += ")" if last else ""
    for key in ("exact_match", "bleu"):
        if key in score:
            return f"{key} {score[key]:.4f}{held_out}"
    return "no score"
