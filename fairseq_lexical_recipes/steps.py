"""A pipeline step made once and then reused while what it was made from is unchanged: the data-bins, the lexicons
and examples/compositional_split's selection, training and scoring steps.

A step's stamp is a JSON file holding its key (the command, the SHA-1 of its input files, settings) and the seconds
the step took. The step is up to date when the recorded key equals the current one (``differences``: the rule the
run directories and the damage records use too) and every output exists. Before
the step runs again its stamp goes, so a step that fails or is stopped half-way is never taken for a finished one;
the stamp is written (whole: a temporary file, renamed) only once the step has succeeded and written its outputs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.textio import read_json, write_json

SECONDS = "seconds"  # recorded beside the key, not part of it


def differences(
    recorded: Mapping[str, object],
    key: Mapping[str, object],
    equivalent: Optional[Mapping[str, object]] = None,
    exact: bool = False,
) -> List[str]:
    """The one rule of "up to date" of every pipeline step (a Step, a run's fingerprint, a damage record): the
    names of ``key`` whose recorded value is neither the current one nor its ``equivalent`` (an older recorded
    value that counts as the same); with ``exact``, also the recorded names the key no longer has (a Step's stamp
    holds its key alone: one with a field more is another key)."""
    equivalent = equivalent or {}
    changed = [
        k for k, v in key.items() if recorded.get(k) != v and (k not in equivalent or recorded.get(k) != equivalent[k])
    ]
    return changed + ([k for k in recorded if k not in key] if exact else [])


@dataclass
class Step:
    name: str  # for messages
    stamp: str  # the stamp file
    key: Mapping[str, object]  # what the outputs are made from
    outputs: Sequence[str] = field(default_factory=tuple)
    log: Optional[str] = None  # where to look when it fails
    # a key's older recorded value that counts as the same (differences' equivalent), e.g. a command recorded with
    # absolute paths before stamps were made portable
    equivalent: Optional[Mapping[str, object]] = None

    def recorded(self) -> Dict[str, object]:
        """The stamp's content ({} where there is none)."""
        return read_json(self.stamp) if os.path.isfile(self.stamp) else {}

    def up_to_date(self) -> bool:
        return (
            os.path.isfile(self.stamp)
            and not differences(
                {k: v for k, v in self.recorded().items() if k != SECONDS}, self.key, self.equivalent, exact=True
            )
            and all(os.path.exists(o) for o in self.outputs)
        )

    def run(self, make: Callable[[], object], force: bool = False) -> Optional[float]:
        """Call ``make`` unless the step is up to date (or with ``force``); the seconds it took, None if skipped."""
        if not force and self.up_to_date():
            return None
        if os.path.isfile(self.stamp):
            os.remove(self.stamp)
        t0 = time.time()
        make()
        seconds = time.time() - t0
        missing = [o for o in self.outputs if not os.path.exists(o)]
        if missing:
            where = f"; log: {self.log}" if self.log else ""
            raise RecipeError(f"{self.name} did not write {', '.join(missing)}{where}")
        write_json(self.stamp, {**self.key, SECONDS: round(seconds, 1)})
        return seconds

    def seconds(self) -> Optional[float]:
        """The seconds the step took when it last ran (None where not recorded)."""
        return self.recorded().get(SECONDS)
