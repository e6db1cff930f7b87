"""A pipeline step made once and then reused while what it was made from is unchanged: the data-bins, the lexicons
and examples/compositional_split's selection, training and scoring steps.

A step's stamp is a JSON file holding its key (the command, the SHA-1 of its input files, settings) and the seconds
the step took. The step is up to date when the recorded key equals the current one and every output exists. Before
the step runs again its stamp goes, so a step that fails or is stopped half-way is never taken for a finished one;
the stamp is written (whole: a temporary file, renamed) only once the step has succeeded and written its outputs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Sequence

from recipes.console import RecipeError
from recipes.textio import read_json, write_json

SECONDS = "seconds"  # recorded beside the key, not part of it


@dataclass
class Step:
    name: str  # for messages
    stamp: str  # the stamp file
    key: Mapping[str, object]  # what the outputs are made from
    outputs: Sequence[str] = field(default_factory=tuple)
    log: Optional[str] = None  # where to look when it fails

    def recorded(self) -> Dict[str, object]:
        """The stamp's content ({} where there is none)."""
        return read_json(self.stamp) if os.path.isfile(self.stamp) else {}

    def up_to_date(self) -> bool:
        old = self.recorded()
        return (
            os.path.isfile(self.stamp)
            and {k: v for k, v in old.items() if k != SECONDS} == dict(self.key)
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
