"""One run's directory (a model and seed: config.json, train.log, checkpoints, train.done, generate.txt,
score.json, run.json) and the rules every pipeline follows for it: the paper recipes and examples/custom (through
runner.Runner), examples/compositional_split and examples/cat_oci.

- A finished run (score.json) with the same fingerprint (commands, data, lexicon) is reused; with another it stops
  the pipeline, as does an unfinished one holding a checkpoint (hours of training): `--force` starts them again.
- An unfinished run resumes from checkpoint_last.pt, or is only decoded where its training finished (train.done);
  one stopped before its first checkpoint starts again, its logs kept as train.log.1, ...
- Only the pipeline's own files are ever deleted or written over (fairseq_lexical_recipes.ownership: what it recorded
when it
  wrote them); a file of a name the run writes (RUN_WRITES) that it did not write is refused before anything runs.
- score.json is written whole (a temporary file, renamed): its presence means the run finished.
- A pipeline holds WORK/.lock while it runs (lock_work_directory): a second one on the same --work stops; a .lock
  that is a link or holds something else is the user's, refused untouched.
"""

from __future__ import annotations

import datetime
import os
import re
import stat
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional

from fairseq_lexical_recipes import ownership
from fairseq_lexical_recipes.console import RecipeError, say
from fairseq_lexical_recipes.fairseq_log import finished_training_seconds
from fairseq_lexical_recipes.steps import differences
from fairseq_lexical_recipes.textio import read_json, write_json

# The names a run writes in its directory (fairseq-train's checkpoints included, which fairseq itself overwrites or
# deletes): a file of such a name that the pipeline did not write stops the run before it starts. They decide
# nothing else: what may be deleted is what the pipeline recorded (fairseq_lexical_recipes.ownership).
RUN_WRITES = re.compile(
    r"checkpoint(_last|_best|_\d+_\d+|\d+|\.best_[\w.-]+)\.pt|(train|generate|score|damage)\.log(\.\d+)?|"
    r"(config|run|score|selection|lla_selection|damage|replicas)\.json|train\.done|generate\.txt|"
    r"(generate\.txt|generate\.log)\.shard\d+|(score|damage)\.json\.tmp"
)

# What fairseq-preprocess and the recipes' stamp write in a data-bin.
PREPROCESS_WRITES = re.compile(
    r"dict\.[\w.-]+\.txt|(train|valid|test)\d*\.[\w.-]+\.(bin|idx)|preprocess\.log|prepared\.json"
)


def refuse_foreign_writes(directory: str, writes: "re.Pattern[str]", what: str) -> None:
    """Stop (nothing written) if ``directory`` holds a file the pipeline did not write whose name matches ``writes``."""
    ownership.refuse_foreign(ownership.foreign_in(directory, writes), what)


def remove_owned(directory: str, keep=lambda name: False) -> List[str]:
    """Delete the pipeline's files in ``directory`` (not ``keep``'s); returns the names of the others (kept)."""
    kept = []
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
        path = os.path.join(directory, name)
        if name == ownership.OWNED or keep(name):
            continue
        if not ownership.remove(path):
            kept.append(name)
    return kept


def has_results(out: str) -> bool:
    """A finished run, or an unfinished one whose checkpoint holds its training so far (the pipeline's files only)."""
    if not os.path.isdir(out):
        return False
    return any(
        (n == "score.json" or n.endswith(".pt")) and ownership.owns(os.path.join(out, n)) for n in os.listdir(out)
    )


def training_ended(out: str) -> bool:
    """Whether the run in ``out`` trained to its end: finished (score.json), its training recorded (train.done), or
    ended by fairseq-train without the record (train.log says so): what ``RunDirectory.open`` decodes, not trains."""
    files = (os.path.join(out, n) for n in ("score.json", "train.done"))
    return (
        any(os.path.isfile(f) for f in files) or finished_training_seconds(os.path.join(out, "train.log")) is not None
    )


@dataclass
class RunState:
    """What ``RunDirectory.open`` decided: the finished run's score, or its finished training, or a resume."""

    score: Optional[dict] = None  # finished before with these settings: nothing to run
    trained: Optional[dict] = None  # train.done of a finished training: decode and score only
    resuming: bool = False  # fairseq resumes from checkpoint_last.pt (train.log appended to)
    # fairseq-train ended its training (train.log says so) but train.done was not written (the recipe stopped in
    # between): its seconds; the run records the training and decodes, without training again
    trained_unrecorded_s: Optional[float] = None


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
        return differences(self.recorded() or {}, self.fingerprint, self.equivalent)

    def stale(self) -> Optional[str]:
        """Why this run's results (finished, or an unfinished training with a checkpoint) do not match the current
        settings, or None (also with --force, or where there is nothing to keep)."""
        if self.force or not self.has_results() or self.recorded() is None:
            return None
        diff = [k.replace("_sha1", "") for k in self.differences()]
        return f"{self.out}: {', '.join(diff)} differ" if diff else None

    def check(self) -> None:
        """What open() refuses, checked with nothing written: a file the run would write that is not the
        pipeline's, or results (finished, or a checkpoint) made with other settings."""
        refuse_foreign_writes(self.out, RUN_WRITES, f"the run {self.who.strip()}")
        why = self.stale()
        if why:
            finished = os.path.isfile(self.path("score.json"))
            raise RecipeError(
                f"{'finished' if finished else 'unfinished'} run with other settings: {why}; "
                f"use --force{'' if finished else ' to start it again'} or another --work"
            )

    def open(self, config: Mapping[str, object]) -> RunState:
        """Decide what the run does (check() first: a RecipeError leaves the directory as it was), clear what an
        earlier attempt left where it starts again (the pipeline's files only), and write config.json (``config`` +
        the fingerprint)."""
        self.check()
        if os.path.isfile(self.path("score.json")) and not self.force:
            return RunState(score=read_json(self.path("score.json")))
        state = RunState()
        with ownership.writing(self.out):
            same = not self.force and not self.differences()
            last = self.path("checkpoint_last.pt")
            if same and os.path.isfile(self.path("train.done")) and os.path.isfile(self.checkpoint):
                state.trained = read_json(self.path("train.done"))
                together = (state.trained.get("training") or {}).get("replicas")
                how = f"trained with seeds {', '.join(map(str, together['seeds']))} together" if together else None
                say(f"{self.who}: {how or 'training finished before'}, decoding {self.checkpoint}")
            elif (
                same
                and ownership.owns(last)
                and os.path.isfile(self.checkpoint)
                and (done_s := finished_training_seconds(self.path("train.log"))) is not None
            ):  # resuming would train one update more than --max-update (fairseq steps before it checks)
                state.trained_unrecorded_s = done_s
                say(f"{self.who}: training finished before (train.log), not recorded; decoding {self.checkpoint}")
            elif same and ownership.owns(last) and self.resumable(self.out):
                state.resuming = True
                say(f"{self.who}: resuming training from {last}")
            elif same and self.recorded() is not None:  # an attempt with nothing to resume from: keep its logs
                what = (
                    self.why_not.format(last=last)
                    if os.path.isfile(last)
                    else "no checkpoint of the unfinished run to resume"
                )
                kept = []
                for name in sorted(os.listdir(self.out)):
                    if name.endswith(".log") and ownership.owns(self.path(name)):
                        n = 1
                        while os.path.lexists(f"{self.path(name)}.{n}"):
                            n += 1
                        ownership.rename(self.path(name), f"{self.path(name)}.{n}")
                        kept.append(f"{name}.{n}")
                remove_owned(self.out, keep=lambda name: re.fullmatch(r".+\.log\.\d+", name))
                say(f"{self.who}: {what}; starting again (its logs kept: {', '.join(kept) or 'none'})")
            else:  # a new run, other settings of a run with nothing to keep, or --force: the run's files go
                foreign = remove_owned(self.out)
                if foreign:
                    say(f"{self.who}: kept in {self.out} (not the pipeline's): {', '.join(foreign)}")
            write_json(self.path("config.json"), {**config, "fingerprint": self.fingerprint})
        return state

    def write_score(self, temporary: str) -> dict:
        """Rename the score written to ``temporary`` to score.json (the run is finished from then on)."""
        os.replace(temporary, self.path("score.json"))
        return read_json(self.path("score.json"))

    def clean_checkpoints(self, keep: str = "used") -> None:
        """``keep``: 'used' (the evaluated checkpoint only), 'all' or 'none'; of the pipeline's checkpoints only."""
        if keep == "all":
            return
        used = os.path.basename(self.checkpoint)
        for name in sorted(os.listdir(self.out)):
            if name.endswith(".pt") and (keep == "none" or name != used):
                ownership.remove(self.path(name))


# What lock_work_directory writes in WORK/.lock; an empty .lock (earlier versions, or a process killed between
# truncating and writing) is taken as the pipeline's too.
LOCK_LINE = re.compile(r"(pid \d+, started [\d:T.-]+\n)?")


def lock_work_directory(work: str):
    """An exclusive lock on WORK/.lock for this process' lifetime (released by the OS when it ends, however it
    ends), or a RecipeError naming the process that holds it: two recipes in one work directory would resume each
    other's training and rename each other's logs.

    WORK/.lock is the pipeline's while it is a regular file holding nothing or the one line written here (pid, start
    time): it is created where missing and only then rewritten. A symbolic link (never followed), a hard link or a
    file with anything else in it is the user's: refused, named, and left as it was."""
    import fcntl

    path = os.path.join(work, ".lock")

    def refuse(why: str):
        return RecipeError(
            f"{path}: {why}, not the pipeline's lock file: move it away or choose another --work; nothing was written"
        )

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if os.path.islink(path):
            raise refuse("a symbolic link") from None
        if os.path.lexists(path) and not os.path.isfile(path):
            raise refuse("not a regular file") from None
        raise RecipeError(f"{path}: cannot open the lock file ({e.strerror})") from None
    handle = os.fdopen(fd, "r+b")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse("not a regular file")
        if st.st_nlink > 1:
            raise refuse(f"a hard link ({st.st_nlink} names)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = handle.read(200).decode("utf-8", "replace").strip() or "another process"
            raise RecipeError(
                f"--work {work} is in use by a running recipe ({holder}); wait for it to end or choose another --work"
            ) from None
        # read once the lock is held: no other pipeline is writing it now
        content = handle.read(201)
        if len(content) > 200 or not LOCK_LINE.fullmatch(content.decode("utf-8", "replace")):
            raise refuse("holds something else")
    except BaseException:
        handle.close()
        raise
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {datetime.datetime.now().isoformat(timespec='seconds')}\n".encode())
    handle.flush()
    return handle
