"""The one door from lexical_offline to the plugin (fairseq_lexical, with torch and fairseq).

Two options of the offline programs need a trained model. They run a function of the plugin named here, as
"module:function" strings (like setup.py's entry points), imported only when the option is used; no other module
of lexical_offline reaches the plugin, and importing this one imports nothing of it
(tests/install/test_import_boundary.py):

    fairseq-lexical-plot-lexicon --checkpoint          fairseq_lexical.analysis.lexicon_unit:checkpoint_rows
    fairseq-lexical-select-compositional uncertainty   fairseq_lexical.cli.select_compositional:run_uncertainty
        (and its `select`, which runs that step)

Where the plugin or torch or fairseq is not installed the option fails with ``PluginUnavailable``, which the
programs print as an error (exit status 2); everything else they do works without them.
"""

from __future__ import annotations

import importlib
from typing import Callable

PLUGIN_ENTRY_POINTS = {
    "plot-lexicon --checkpoint": "fairseq_lexical.analysis.lexicon_unit:checkpoint_rows",
    "select-compositional uncertainty": "fairseq_lexical.cli.select_compositional:run_uncertainty",
}

# An ImportError of one of these means the plugin cannot run here (not a bug in it).
PLUGIN_PACKAGES = ("fairseq_lexical", "fairseq", "fairseq_cli", "torch")


class PluginUnavailable(Exception):
    """The plugin, torch or fairseq cannot be imported: the option that needs a model cannot run."""


def plugin_function(name: str, option: str) -> Callable:
    """The plugin's function for ``name`` (a key of PLUGIN_ENTRY_POINTS), imported now. ``option`` names what the
    user asked for, in the message of PluginUnavailable."""
    module, function = PLUGIN_ENTRY_POINTS[name].split(":")
    try:
        loaded = importlib.import_module(module)
    except ImportError as e:
        missing = (getattr(e, "name", None) or "").split(".")[0]
        if missing not in PLUGIN_PACKAGES:
            raise
        raise PluginUnavailable(
            f"{option} needs a trained model, hence the fairseq_lexical plugin with torch and fairseq, which do not "
            f"import here ({e}); install them (README: Installation)"
        ) from None
    return getattr(loaded, function)
