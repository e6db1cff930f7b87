"""One run's directory (a model and seed: config.json, train.log, checkpoints, train.done, generate.txt,
score.json, run.json) and the rules every pipeline follows for it: the paper recipes, examples/custom and
examples/compositional_split (through runner.Recipe) and examples/cat_oci.

- A finished run (score.json) with the same fingerprint (commands, data, lexicon) is reused; with another it stops
  the pipeline, as does an unfinished one holding a checkpoint (hours of training): `--force` starts them again.
- An unfinished run resumes from checkpoint_last.pt, or is only decoded where its training finished (train.done);
  one stopped before its first checkpoint starts again, its logs kept as train.log.1, ...
- Only the names in RUN_OUTPUTS are ever deleted, and a directory holding none of the pipeline's files (no
  config.json) is refused rather than written into.
- score.json is written whole (a temporary file, renamed): its presence means the run finished.
- A pipeline holds WORK/.lock while it runs (lock_work_directory): a second one on the same --work stops.
"""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional

from recipes.console import RecipeError, say
from recipes.textio import read_json, write_json

# What the pipelines write in a run directory: the only names they ever delete. Anything else there is the user's.
RUN_OUTPUTS = re.compile(
    r"checkpoint[\w.-]*\.pt|[\w.-]+\.log(\.\d+)?|(config|run|score|selection|lla_selection)\.json|"
    r"train\.done|generate[\w.-]*\.txt|damage[\w.-]*\.json|[\w.-]+\.tmp"
)


# What the pipelines write in a data-bin (fairseq-preprocess's files and the recipes' stamp): the only names they
# delete there.
PREPROCESS_OUTPUTS = re.compile(
    r"dict\.[\w.-]+\.txt|(train|valid|test)\d*\.[\w.-]+\.(bin|idx)|preprocess\.log|"
    r"prepared\.json"
)


def foreign_files(directory: str, ours: "re.Pattern[str]") -> List[str]:
    """Names in ``directory`` the pipelines do not write (subdirectories included)."""
    if not os.path.isdir(directory):
        return []
    return sorted(
        n for n in os.listdir(directory) if not (os.path.isfile(os.path.join(directory, n)) and ours.fullmatch(n))
    )


def remove_outputs(directory: str, ours: "re.Pattern[str]", keep=lambda name: False) -> None:
    """Delete the pipelines' own files in ``directory`` (not ``keep``'s); everything else stays."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and ours.fullmatch(name) and not keep(name):
            os.remove(path)


def refuse_foreign_files(directory: str, ours: "re.Pattern[str]", what: str) -> None:
    foreign = foreign_files(directory, ours)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise RecipeError(
            f"{directory} holds files the recipe did not write ({shown}); it would have to replace "
            f"{what} there: move them, or choose another --work"
        )


def has_results(out: str) -> bool:
    """A finished run, or an unfinished one whose checkpoint holds its training so far."""
    return os.path.isfile(os.path.join(out, "score.json")) or any(
        n.endswith(".pt") for n in (os.listdir(out) if os.path.isdir(out) else ())
    )


@dataclass
class RunState:
    """What ``RunDirectory.open`` decided: the finished run's score, or its finished training, or a resume."""

    score: Optional[dict] = None  # finished before with these settings: nothing to run
    trained: Optional[dict] = None  # train.done of a finished training: decode and score only
    resuming: bool = False  # fairseq resumes from checkpoint_last.pt (train.log appended to)


class RunDirectory:
    """The directory ``out`` of one run, whose results are valid for ``fingerprint``; ``who`` names the run in
    messages, ``checkpoint`` is the file it evaluates, ``resumable(out)`` says whether an unfinished training can go
    on from its checkpoint_last.pt (``why_not`` says why not, with ``{last}`` for that file), ``equivalent`` maps a
    fingerprint key to an older recorded value that counts as the same."""

    def __init__(
        self,
        out: str,
        fingerprint: Mapping[str, object],
        who: str,
        checkpoint: str,
        force: bool = False,
        resumable: Callable[[str], bool] = lambda out: True,
        why_not: str = "its training cannot resume from {last}",
        equivalent: Optional[Dict[str, object]] = None,
    ):
        self.out, self.fingerprint, self.who, self.checkpoint = out, dict(fingerprint), who, checkpoint
        self.force, self.resumable, self.why_not, self.equivalent = force, resumable, why_not, equivalent or {}

    def path(self, name: str) -> str:
        return os.path.join(self.out, name)

    def has_results(self) -> bool:
        return has_results(self.out)

    def recorded(self) -> Optional[dict]:
        config = self.path("config.json")
        return (read_json(config).get("fingerprint") or {}) if os.path.isfile(config) else None

    def differences(self) -> List[str]:
        """The fingerprint keys whose recorded value is neither the current one nor its ``equivalent``."""
        old = self.recorded() or {}
        return [
            k
            for k, v in self.fingerprint.items()
            if old.get(k) != v and (k not in self.equivalent or old.get(k) != self.equivalent[k])
        ]

    def stale(self) -> Optional[str]:
        """Why this run's results (finished, or an unfinished training with a checkpoint) do not match the current
        settings, or None (also with --force, or where there is nothing to keep)."""
        if self.force or not self.has_results() or self.recorded() is None:  # (no config.json: open() refuses it)
            return None
        diff = [k.replace("_sha1", "") for k in self.differences()]
        return f"{self.out}: {', '.join(diff)} differ" if diff else None

    def open(self, config: Mapping[str, object]) -> RunState:
        """Decide what the run does (before writing anything: a RecipeError leaves the directory as it was), clear
        what an earlier attempt left where it starts again, and write config.json (``config`` + the fingerprint)."""
        if os.path.isdir(self.out) and self.recorded() is None:  # not a run of the pipelines
            refuse_foreign_files(self.out, re.compile(r"(?!)"), f"the run's files ({self.who})")
        why = self.stale()
        if why:
            finished = os.path.isfile(self.path("score.json"))
            raise RecipeError(
                f"{'finished' if finished else 'unfinished'} run with other settings: {why}; "
                f"use --force{'' if finished else ' to start it again'} or another --work"
            )
        if os.path.isfile(self.path("score.json")) and not self.force:
            return RunState(score=read_json(self.path("score.json")))
        state = RunState()
        if os.path.isdir(self.out):
            same = not self.force and not self.differences()
            last = self.path("checkpoint_last.pt")
            if same and os.path.isfile(self.path("train.done")) and os.path.isfile(self.checkpoint):
                state.trained = read_json(self.path("train.done"))
                say(f"{self.who}: training finished before, decoding {self.checkpoint}")
            elif same and os.path.isfile(last) and self.resumable(self.out):
                state.resuming = True
                say(f"{self.who}: resuming training from {last}")
            elif same:  # nothing to resume from: start again, keeping the attempt's logs (x.log.N)
                what = (
                    self.why_not.format(last=last)
                    if os.path.isfile(last)
                    else "no checkpoint of the unfinished run to resume"
                )
                kept = []
                for name in sorted(os.listdir(self.out)):
                    path = self.path(name)
                    if name.endswith(".log") and os.path.isfile(path):
                        n = 1
                        while os.path.exists(f"{path}.{n}"):
                            n += 1
                        os.replace(path, f"{path}.{n}")
                        kept.append(f"{name}.{n}")
                remove_outputs(self.out, RUN_OUTPUTS, keep=lambda name: re.fullmatch(r".+\.log\.\d+", name))
                say(f"{self.who}: {what}; starting again (its logs kept: {', '.join(kept) or 'none'})")
            else:  # other settings of a run with nothing to keep, or --force: the run's files go, the user's stay
                remove_outputs(self.out, RUN_OUTPUTS)
                foreign = foreign_files(self.out, RUN_OUTPUTS)
                if foreign:
                    say(f"{self.who}: starting again; kept in {self.out} (not the recipe's): {', '.join(foreign)}")
        os.makedirs(self.out, exist_ok=True)
        write_json(self.path("config.json"), {**config, "fingerprint": self.fingerprint})
        return state

    def write_score(self, temporary: str) -> dict:
        """Rename the score written to ``temporary`` to score.json (the run is finished from then on)."""
        os.replace(temporary, self.path("score.json"))
        return read_json(self.path("score.json"))

    def clean_checkpoints(self, keep: str = "used") -> None:
        """``keep``: 'used' (the evaluated checkpoint only), 'all' or 'none'."""
        if keep == "all":
            return
        used = os.path.basename(self.checkpoint)
        for name in os.listdir(self.out):
            if name.endswith(".pt") and (keep == "none" or name != used):
                os.remove(self.path(name))


def lock_work_directory(work: str):
    """An exclusive lock on WORK/.lock for this process' lifetime (released by the OS when it ends, however it
    ends), or a RecipeError naming the process that holds it: two recipes in one work directory would resume each
    other's training and rename each other's logs."""
    import fcntl

    handle = open(os.path.join(work, ".lock"), "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise RecipeError(
            f"--work {work} is in use by a running recipe ({holder}); wait for it to end or choose another --work"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {datetime.datetime.now().isoformat(timespec='seconds')}\n")
    handle.flush()
    return handle
