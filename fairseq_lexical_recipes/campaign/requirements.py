"""Requirements as packaging reads them, and the Requires-Dist of a distribution or a wheel: what a GPU campaign's
carry folder (carry: which wheels to carry, which of them the device lacks) and the install scripts
(tools/setup_env.sh and tools/wheelhouse.sh, through tools/install_helpers.py) know of packages, in one place.

Standalone: the standard library and packaging only (pip's vendored copy where packaging is not installed), nothing
of this package, so that tools/install_helpers.py loads this file by its path before anything is installed.
"""

import email
import importlib.metadata
import zipfile

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
except ImportError:  # a fresh environment: pip's copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import InvalidVersion, Version

__all__ = ["InvalidVersion", "Requirement", "Version", "canonicalize_name", "metadata_of", "requires"]


def metadata_of(dist_or_wheel):
    """The core metadata of an installed distribution (by name) or of a .whl file."""
    if dist_or_wheel.endswith(".whl"):
        with zipfile.ZipFile(dist_or_wheel) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            return email.message_from_bytes(z.read(name))
    return importlib.metadata.metadata(dist_or_wheel)


def requires(dist_or_wheel, extras=(), exclude=()):
    """The requirements of a distribution or a wheel, as strings without their markers: those whose markers hold
    for ``extras`` and this interpreter, less the ``exclude``d names."""
    excluded = {canonicalize_name(n) for n in exclude}
    out = []
    for line in metadata_of(dist_or_wheel).get_all("Requires-Dist") or []:
        req = Requirement(line)
        if canonicalize_name(req.name) in excluded:
            continue
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            continue
        req.marker = None
        out.append(str(req))
    return out
