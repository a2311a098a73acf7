"""``j2c-unpack``'s command line: its options, their defaults and the exit codes ``--help`` lists.

Stdlib only, so ``--help`` and a bad option answer before any phase module (or pydantic) loads.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

# The outputs' caps (MB) and sync period (minutes) when the server passes none (outputs.py).
DEFAULT_MAX_FILE_MB = 5000.0
DEFAULT_MAX_TOTAL_MB = 20000.0
DEFAULT_SYNC_MINUTES = 10.0
# The checkpoint folders' sync (outputs.py, checkpoints.py) when the server passes none.
DEFAULT_CHECKPOINTS_EVERY_S = 30.0
DEFAULT_CHECKPOINTS_KEEP = 3
DEFAULT_CHECKPOINTS_MAX_MB = 20000.0

PATHS_ENV = "J2C_UNPACK_PATHS"
PATHS_CHOICES = ("original", "relocate")
_EXIT_CODES = """exit codes:
  the entry point's own exit code (128+N when signal N ended it), or one of j2c-unpack's:
  65 manifest invalid      66 manifest or layer missing   67 layer corrupt (digest)
  68 unsafe archive entry  69 Python version mismatch     70 venv broken after relocation
  71 entry not runnable    72 what the job needs is not here (all listed)
  73 outputs not uploaded  74 local disk / workdir / space
  75 store unreachable (retry may help)"""


def parse_command_line(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Options before ``--``; everything after it goes to the entry point unchanged."""
    own, user_args = argv, []
    if "--" in argv:
        split = argv.index("--")
        own, user_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(
        prog="j2c-unpack",
        usage="%(prog)s MANIFEST_URI [options] [-- ARGS...]",
        description="Fetch a j2c job's layers, verify and extract them, make the venv work here, "
        "and run the entry point with it.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "manifest",
        metavar="MANIFEST_URI",
        help="file://, s3:// or https://; env:NAME: the value of $NAME (a presigned URL)",
    )
    parser.add_argument(
        "--manifest-digest",
        metavar="sha256:HEX",
        type=_digest,
        help="the sha256 of the manifest's bytes: any other manifest is refused (exit 65), "
        "whatever its path; the server gives every job its own",
    )
    parser.add_argument(
        "--variant",
        type=int,
        default=None,
        help="a sweep's manifest: run this row of its variant table",
    )
    parser.add_argument(
        "--variant-env",
        default=None,
        metavar="VAR",
        help="a sweep's manifest: run the row the variable VAR names (an array task's index)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="j2c-unpack's folder, kept after the job (default: a temporary folder, removed "
        "at the end except outputs)",
    )
    parser.add_argument(
        "--paths",
        choices=PATHS_CHOICES,
        default=None,
        help="restore code and venv at their original paths when free (default), "
        f"or place them under the workdir (also {PATHS_ENV})",
    )
    parser.add_argument(
        "--trust-original-paths",
        action="store_true",
        help="use original paths without checking that no other user can change them "
        "(only on nodes without other users; also J2C_UNPACK_TRUST_PATHS=1)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        help="$J2C_OUTPUT_DIR for the job (default: $J2C_OUTPUT_DIR or <workdir>/outputs)",
    )
    parser.add_argument(
        "--output-uri",
        help="store prefix to upload the outputs to (the output dir and what the job wrote in "
        "its working copy), during and after the run",
    )
    parser.add_argument(
        "--outputs-max-file-mb",
        type=float,
        default=DEFAULT_MAX_FILE_MB,
        help=f"an output larger than this is left out (default {DEFAULT_MAX_FILE_MB:g})",
    )
    parser.add_argument(
        "--outputs-max-total-mb",
        type=float,
        default=DEFAULT_MAX_TOTAL_MB,
        help=f"outputs past this total are left out, largest first (default "
        f"{DEFAULT_MAX_TOTAL_MB:g})",
    )
    parser.add_argument(
        "--outputs-sync-minutes",
        type=float,
        default=DEFAULT_SYNC_MINUTES,
        help=f"upload new and changed outputs this often while the job runs, and on SIGTERM "
        f"(0: only on SIGTERM; default {DEFAULT_SYNC_MINUTES:g})",
    )
    parser.add_argument(
        "--checkpoint-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of the working directory the job writes checkpoints to (repeatable): "
        "synced to the outputs whenever it changes (at most every --checkpoints-every-s), the "
        "newest --checkpoints-keep entries kept in the store",
    )
    parser.add_argument(
        "--checkpoints-every-s",
        type=float,
        default=DEFAULT_CHECKPOINTS_EVERY_S,
        help=f"upload a changed checkpoint folder at most this often (default "
        f"{DEFAULT_CHECKPOINTS_EVERY_S:g})",
    )
    parser.add_argument(
        "--checkpoints-keep",
        type=int,
        default=DEFAULT_CHECKPOINTS_KEEP,
        help=f"newest entries of each checkpoint folder kept in the store (default "
        f"{DEFAULT_CHECKPOINTS_KEEP})",
    )
    parser.add_argument(
        "--checkpoints-max-mb",
        type=float,
        default=DEFAULT_CHECKPOINTS_MAX_MB,
        help=f"cap on the checkpoints in the store, newest first (default "
        f"{DEFAULT_CHECKPOINTS_MAX_MB:g})",
    )
    parser.add_argument(
        "--restore",
        metavar="PLAN_URI",
        help="a resumed attempt's restore plan: the checkpoint files of the job's last attempt, "
        "restored into the working copy before the entry point starts (needs --restore-digest)",
    )
    parser.add_argument(
        "--restore-digest",
        metavar="sha256:HEX",
        type=_digest,
        help="the sha256 of the restore plan's bytes: any other plan is refused (exit 65)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help="node-local layer cache: verified blobs and extracted layers kept between jobs "
        "(also J2C_UNPACK_CACHE; default: none)",
    )
    parser.add_argument(
        "--cache-max",
        metavar="SIZE",
        help="the cache's size cap, e.g. 20G (also J2C_UNPACK_CACHE_MAX; default 20G); least "
        "recently used entries not in use are evicted",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="nodes the job runs on; this one's rank comes from the backend (ranks.py)",
    )
    parser.add_argument(
        "--launcher",
        choices=("none", "torchrun"),
        default="none",
        help="run the entry point itself (default) or under torchrun on this node",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        help="torchrun's workers on this node (with --launcher torchrun)",
    )
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="prepare everything (download, extract, relocate) but do not run the entry point",
    )
    options = parser.parse_args(own)
    if (options.restore is None) != (options.restore_digest is None):
        parser.error("--restore and --restore-digest go together")
    if options.checkpoints_keep < 1:
        parser.error("--checkpoints-keep must be at least 1")
    for folder in options.checkpoint_dir:
        parts = folder.rstrip("/").split("/")
        if folder.startswith("/") or any(part in ("", ".", "..") for part in parts):
            parser.error(f"--checkpoint-dir {folder!r}: a folder inside the working directory")
    if options.paths is None:
        # The server's scheduler.placement, or the job's own env, when the option is not given.
        chosen = os.environ.get(PATHS_ENV, "").strip() or "original"
        if chosen not in PATHS_CHOICES:
            parser.error(f"{PATHS_ENV}={chosen!r}: expected one of {', '.join(PATHS_CHOICES)}")
        options.paths = chosen
    return options, user_args


_HEX = "0123456789abcdef"


def _digest(text: str) -> str:
    """``--manifest-digest``: ``sha256:`` and 64 lowercase hex digits."""
    hexdigest = text.removeprefix("sha256:")
    if not text.startswith("sha256:") or len(hexdigest) != 64 or hexdigest.strip(_HEX):
        raise argparse.ArgumentTypeError(f"{text!r} is not sha256:<64 lowercase hex digits>")
    return text
