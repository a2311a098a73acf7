"""Why ``j2c-unpack`` stops before running the entry point, and the exit code of each reason.

Every failure of j2c-unpack's own has its own exit code, so a scheduler (or a person reading a
job's status) can tell "the layer is corrupt" from "the Python does not match" without parsing
logs. The entry point's own exit code passes through unchanged; these codes only appear when
j2c-unpack itself gives up (docs/unpack.md has the table).
"""

from __future__ import annotations

from enum import IntEnum

from j2c_server.core.errors import J2CError


class ExitCode(IntEnum):
    USAGE = 2  # argparse's own code for a bad command line
    MANIFEST = 65  # the manifest cannot be read or is not valid
    MISSING = 66  # the manifest or a layer is not in the store (or not accessible)
    CORRUPT = 67  # a layer's bytes do not match its digest, or it is not a tar.zst
    UNSAFE = 68  # a layer holds an entry that would land outside its target
    PYTHON = 69  # the venv's Python major.minor differs from this interpreter's
    VENV = 70  # the venv does not work at its new home
    ENTRY = 71  # the entry point cannot be started (missing file, no nbclient, ...)
    NEEDS = 72  # this Python lacks what the job needs (manifest format 6's list, unpack/needs.py)
    OUTPUTS = 73  # the outputs could not be uploaded (after a successful run)
    LOCAL_IO = 74  # the workdir or a target folder cannot be written, or the disk is too small
    UNAVAILABLE = 75  # the store could not be reached; retrying later may help


class UnpackError(J2CError):
    """Base of j2c-unpack's failures; ``exit_code`` is what the process exits with."""

    exit_code: ExitCode = ExitCode.LOCAL_IO
    code = "unpack"


class ManifestInvalid(UnpackError):
    exit_code = ExitCode.MANIFEST
    code = "manifest_invalid"


class LayerMissing(UnpackError):
    exit_code = ExitCode.MISSING
    code = "layer_missing"


class LayerCorrupt(UnpackError):
    exit_code = ExitCode.CORRUPT
    code = "layer_corrupt"


class UnsafeEntry(UnpackError):
    exit_code = ExitCode.UNSAFE
    code = "unsafe_entry"


class PythonMismatch(UnpackError):
    exit_code = ExitCode.PYTHON
    code = "python_mismatch"


class VenvBroken(UnpackError):
    exit_code = ExitCode.VENV
    code = "venv_broken"


class EntryNotRunnable(UnpackError):
    exit_code = ExitCode.ENTRY
    code = "entry_not_runnable"


class NeedsNotMet(UnpackError):
    exit_code = ExitCode.NEEDS
    code = "needs_not_met"


class OutputsNotUploaded(UnpackError):
    exit_code = ExitCode.OUTPUTS
    code = "outputs_not_uploaded"


class LocalIOError(UnpackError):
    exit_code = ExitCode.LOCAL_IO
    code = "local_io"


class DiskFull(LocalIOError):
    """The layers do not fit on the disk they are going to (checked before downloading)."""

    code = "disk_full"


class StoreUnavailable(UnpackError):
    exit_code = ExitCode.UNAVAILABLE
    code = "store_unavailable"
