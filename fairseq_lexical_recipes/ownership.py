"""Which files in a work directory are the pipeline's: the ones it recorded when it wrote them.

Every directory the pipelines write into holds OWNED (.owned_files.json): for each file they wrote there, its size
and modification time once written. A file is the pipeline's while it is still in that state (as os.lstat sees it: a
symbolic link is never the pipeline's, so nothing is written through one); any other file, whatever its name, is
the user's: it is never deleted or overwritten, and where the pipeline would have to write a file of that name it
refuses before writing anything (refuse_foreign). A damaged record is refused too, in those checks, naming it.

A step that writes into a directory runs inside ``writing(directory)``: the directory's state before the step is
recorded first ("running"), and when the step ends, however it ends (error, Ctrl-C, SIGTERM), the files it created
or changed are recorded. Only a step killed with no chance to record (SIGKILL, a power cut) leaves its "running"
record behind; the files created since that snapshot, and those of the pipeline's it changed, are then taken as
that step's (and said so): the one case where a file put there by hand in the meantime would be taken for the
pipeline's.

Directories written before these records existed (a recipe's config.json, a run's fingerprint, a data-bin's
prepared.json say so) are adopted by the names the pipelines wrote then (LEGACY_NAMES), in memory until the next
write records them.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import stat
import threading
from typing import Dict, Iterable, Iterator, List, Optional

from fairseq_lexical_recipes.console import RecipeError, say

OWNED = ".owned_files.json"

# What the pipelines wrote before OWNED existed: the names a directory they made is adopted by.
LEGACY_NAMES = re.compile(
    r"checkpoint[\w.-]*\.pt|[\w.-]+\.log(\.\d+)?|[\w.-]+\.json|train\.done|generate[\w.-]*\.txt|[\w.-]+\.tmp|"
    r"dict\.[\w.-]+\.txt|(train|valid|test)\d*\.[\w.-]+\.(bin|idx)|(train|valid|test|lexcorpus)\.(src|tgt)|"
    r"[\w.-]+\.tsv"
)

_active: Dict[str, int] = {}  # directories inside writing() in this process (nested calls record once)
_guard = threading.Lock()


def _state(path: str) -> Optional[List[int]]:
    """[size, mtime_ns] of the regular file ``path``, or None. lstat: a symbolic link is never the pipeline's, even
    one leading to a file it wrote (moved out, ``mv`` keeps the mtime): nothing is written through one."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns] if stat.S_ISREG(st.st_mode) else None


def _states(value: object) -> bool:
    """Whether ``value`` is a record's name -> [size, mtime_ns] mapping."""
    return isinstance(value, dict) and all(
        isinstance(n, str) and isinstance(s, list) and len(s) == 2 and all(type(x) is int for x in s)
        for n, s in value.items()
    )


def _is_record(data: object) -> bool:
    """Whether ``data`` (OWNED's content) is a record: "files" such a mapping, "running" None or a step's snapshot
    with such "before" (and "recorded")."""
    if not isinstance(data, dict) or not _states(data.get("files")):
        return False
    running = data.get("running")
    return running is None or (
        isinstance(running, dict) and _states(running.get("before")) and _states(running.get("recorded", {}))
    )


def _files(directory: str) -> Dict[str, List[int]]:
    if not os.path.isdir(directory):
        return {}
    out = {}
    for name in os.listdir(directory):
        if name != OWNED and (s := _state(os.path.join(directory, name))) is not None:
            out[name] = s
    return out


def _made_by_step(name: str, now: List[int], before: Dict[str, List[int]], recorded: Dict[str, List[int]]) -> bool:
    """Whether a step that started with the directory's files in state ``before`` (the pipeline's as ``recorded``)
    wrote ``name``, now in state ``now``: a new file, or a changed one that was the pipeline's (the checks before
    a step refuse a user's file of a name it writes, so a changed user's file was changed by someone else)."""
    if name not in before:
        return True
    return before[name] != now and recorded.get(name) == before[name]


def _legacy(directory: str) -> bool:
    """Whether ``directory`` was made by a pipeline before OWNED existed (its own stamp, or its WORK's, says so)."""

    def stamp(path: str, keys) -> bool:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError, RecursionError):
            return False
        return isinstance(data, dict) and all(k in data for k in keys)

    here = lambda name: os.path.join(directory, name)  # noqa: E731
    parent = os.path.dirname(os.path.abspath(directory))
    return (
        stamp(here("config.json"), ("fingerprint",))
        or stamp(here("config.json"), ("task", "command", "work"))
        or stamp(here("prepared.json"), ("data_sha1",))
        # WORK/data, WORK/lexicons of a WORK made before the records (once recorded, a new folder is not)
        or (
            not os.path.exists(os.path.join(parent, OWNED))
            and stamp(os.path.join(parent, "config.json"), ("task", "command", "work"))
        )
    )


class Record:
    """OWNED of one directory as read now: ``files`` (name -> [size, mtime_ns]) and ``running`` (the snapshot of an
    unfinished step, or None)."""

    def __init__(self, directory: str):
        self.directory, self.path = directory, os.path.join(directory, OWNED)
        self.files: Dict[str, List[int]] = {}
        self.running: Optional[dict] = None
        if os.path.isfile(self.path):
            try:
                with open(self.path, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError, RecursionError):  # (RecursionError: nested deeper than json reads)
                data = None
            # checked whole here: a damaged record stops the checks before writing, not a step half-way
            if not _is_record(data):
                raise RecipeError(f"{self.path}: not a record of the pipeline's files (move it away)")
            self.files, self.running = dict(data["files"]), data.get("running")
        elif _legacy(directory):
            self.files = {n: s for n, s in _files(directory).items() if LEGACY_NAMES.fullmatch(n)}

    def owns(self, name: str) -> bool:
        now = _state(os.path.join(self.directory, name))
        if now is None:
            return False
        if self.files.get(name) == now:
            return True
        # a step killed before it could record: what it created, or changed of its own, is its own
        running = self.running
        return running is not None and _made_by_step(name, now, running["before"], running.get("recorded", {}))

    def settle(self) -> None:
        """Take an interrupted step's files into ``files`` (said once), and forget files no longer there."""
        if self.running is not None:
            taken = sorted(n for n in _files(self.directory) if self.owns(n) and self.files.get(n) is None)
            if taken:
                say(f"   {self.directory}: an interrupted step left {', '.join(taken)}: taken as the pipeline's")
            self.files.update({n: s for n, s in _files(self.directory).items() if self.owns(n)})
            self.running = None
        self.files = {n: s for n, s in self.files.items() if _state(os.path.join(self.directory, n)) == s}

    def save(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"files": self.files, "running": self.running}, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def adopt(directories: Iterable[str], names: Optional["re.Pattern[str]"] = None) -> None:
    """Record what a directory made before the records holds by LEGACY_NAMES (before the first write into a work
    directory: once its WORK has a record, a directory without one is a new one). With ``names``, the caller knows
    by its own stamps that the directories are its pipeline's: they are adopted by those names."""
    for d in directories:
        if not os.path.isdir(d) or os.path.exists(os.path.join(d, OWNED)):
            continue
        if names is not None:
            record = Record(d)
            record.files = {n: s for n, s in _files(d).items() if names.fullmatch(n)}
            record.save()
        elif _legacy(d):
            Record(d).save()


def owns(path: str) -> bool:
    return Record(os.path.dirname(os.path.abspath(path))).owns(os.path.basename(path))


def linked_folder(directory: str) -> Optional[str]:
    """The folder on the way to ``directory`` (itself included) that is a symbolic link placed inside a folder the
    pipeline writes (one holding a record), or None: writing there would write outside WORK. A link above WORK (WORK
    itself given as a link, a linked home folder) is the user's choice of place and is followed."""
    path = os.path.abspath(directory)
    while path != os.path.dirname(path):
        if os.path.islink(path) and os.path.isfile(os.path.join(os.path.dirname(path), OWNED)):
            return path
        path = os.path.dirname(path)
    return None


def foreign(paths: Iterable[str]) -> List[str]:
    """Those of ``paths`` that exist and are not the pipeline's, or whose folder is a linked one inside WORK
    (linked_folder: that folder is named). The records of their directories are read whether the paths exist or
    not: these are the checks before writing, where a damaged one stops the pipeline."""
    paths = list(paths)
    linked = []
    for directory in dict.fromkeys(os.path.dirname(os.path.abspath(p)) for p in paths):
        link = linked_folder(directory)
        if link is not None:
            linked.append(link)
            continue
        Record(directory)
    linked = list(dict.fromkeys(linked))
    through = tuple(link + os.sep for link in linked)
    return linked + [
        p for p in paths if not os.path.abspath(p).startswith(through) and os.path.lexists(p) and not owns(p)
    ]


def foreign_in(directory: str, names: "re.Pattern[str]") -> List[str]:
    """The files (or other entries) in ``directory`` whose names match ``names`` and that are not the pipeline's
    (a RecipeError if its record is damaged)."""
    if not os.path.isdir(directory):
        return []
    Record(directory)
    return foreign(os.path.join(directory, n) for n in sorted(os.listdir(directory)) if names.fullmatch(n))


def refuse_foreign(paths: Iterable[str], what: str) -> None:
    """A RecipeError naming the files the pipeline would have to write over (``what``) and did not write."""
    paths = list(paths)
    if paths:
        shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
        raise RecipeError(
            f"{shown}: not written by the pipeline (or changed since), and {what} would replace "
            f"{'it' if len(paths) == 1 else 'them'}: move {'it' if len(paths) == 1 else 'them'} away, or choose "
            "another --work; nothing was written"
        )


def remove(path: str) -> bool:
    """Delete ``path`` if it is the pipeline's (True); anything else stays (False)."""
    directory, name = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    record = Record(directory)
    if not record.owns(name):
        return False
    os.remove(path)
    record.files.pop(name, None)
    record.save()
    return True


def rename(path: str, new: str) -> None:
    """Rename the pipeline's file ``path`` to ``new`` (same directory, a name not in use), keeping it recorded."""
    directory = os.path.dirname(os.path.abspath(path))
    record = Record(directory)
    os.replace(path, new)
    record.files.pop(os.path.basename(path), None)
    record.files[os.path.basename(new)] = _state(new)
    record.save()


@contextlib.contextmanager
def writing(directory: str) -> Iterator[None]:
    """Record as the pipeline's what is created or changed in ``directory`` inside the block (see the module)."""
    directory = os.path.abspath(directory)
    with _guard:  # threads (examples/compositional_split --jobs) nest in a block their parent holds
        nested = bool(_active.get(directory))
        if nested:
            _active[directory] += 1
    if nested:
        try:
            yield
        finally:
            with _guard:
                _active[directory] -= 1
        return
    link = linked_folder(directory)
    if link is not None:  # (the checks before writing name it first; this is the last guard)
        raise RecipeError(
            f"{link}: a symbolic link to a folder, inside WORK: nothing is written through one; move it away"
        )
    os.makedirs(directory, exist_ok=True)
    record = Record(directory)
    record.settle()
    before, recorded = _files(directory), dict(record.files)
    record.running = {
        "pid": os.getpid(),
        "started": datetime.datetime.now().isoformat(),
        "before": before,
        "recorded": recorded,
    }
    record.save()
    _active[directory] = 1
    try:
        yield
    finally:
        _active.pop(directory, None)
        record = Record(directory)  # remove() and rename() may have changed it inside the block
        after = _files(directory)
        record.files.update({n: s for n, s in after.items() if _made_by_step(n, s, before, recorded)})
        record.files = {n: s for n, s in record.files.items() if after.get(n) == s}
        record.running = None
        record.save()
