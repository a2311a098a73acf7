"""``j2c-unpack MANIFEST_URI [options] [-- ARGS...]``: a job's first process in its container.

The runbook, one phase after the other; each logs its lines on stderr, tagged as j2c's (log.py;
before them, the credentials the scheduler handed over in ``$J2C_SECRETS_FILE`` join the
environment, job_secrets.py):

1. manifest      fetch the manifest, refuse it unless its bytes hash to --manifest-digest
                 (or, without one, to its content-addressed name), and validate it;
                 with the node cache, a manifest validated there before is not validated again
                 (cache/plans.py: no pydantic import on a warm start)
2. python        the venv's base: its own (the lab's, recorded) when this node has it at
                 that version, else this node's (interpreter.py, said in one line); the
                 venv's Python major.minor must be that base's; before it, this
                 interpreter's inventory, one ``inventory: {json}`` line (inventory.py;
                 with the node cache only the first time for this interpreter), and, for a
                 target the lab did not know, what the job needs of it (needs.py: every gap
                 listed at once, exit 72)
3. placing       original paths when free and private to the job's user, else under the
                 workdir; then the free space for the layers is checked
4. downloading   every layer at once; verifying: each one's sha256 before it is used
5. extracting    safely, code first (every part of it, format_version 3, into the code
                 folder); then the code layer's big files (bigfiles.py), each its own
                 verified blob, placed at its path
6. relocating    point the venv at that base, rewrite moved paths, prove it runs;
                 the venv's packages that shadow this interpreter's own are named in the log
7. running       a resumed attempt's checkpoint restored first (``--restore``: restore.py);
                 then the entry point with the venv's interpreter; signals forwarded (with
                 ``--nodes N``, on this node's rank, under torchrun with ``--launcher``: ranks.py);
                 a sweep's variant with ``retries`` re-run in place while it exits non-zero
                 (never after a signal)
8. uploading outputs   when --output-uri is given, also after a failed run: the output dir
                 and what the job created or changed in its working copy (outputs.py,
                 written.py; snapshot right before phase 7, synced during it and on SIGTERM),
                 its checkpoint folders as they change (``--checkpoint-dir``: checkpoints.py)

Last of all, one ``summary: {json}`` line (summary.py): phase durations, bytes downloaded
and reused, the exit code, for a cluster's log pipeline.

With ``--cache-dir`` (cache.py), phases 4-6 go through the node's layer cache: entries found or
built once, then used in place or materialised; without a usable cache, as above.

A failure in phases 1-6 stops the job before any user code runs, with the exit code errors.py
assigns to it; after that the exit code is the entry point's own. Whatever happens (a failure,
SIGTERM or SIGINT), the copies placed at original paths are removed before j2c-unpack exits.
The phase modules are imported after the command line is parsed, so ``--help`` answers without
loading pydantic.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from j2c_server.core.units import byte_size
from j2c_server.unpack import summary
from j2c_server.unpack.command_line import parse_command_line
from j2c_server.unpack.errors import LocalIOError, UnpackError
from j2c_server.unpack.log import Stage, error, say, take_tag, warn

if TYPE_CHECKING:
    from j2c_server.core.manifest_plan import ManifestPlan
    from j2c_server.unpack.cache.node import Cache
    from j2c_server.unpack.downloads import Fetched
    from j2c_server.unpack.homes import Placement
    from j2c_server.unpack.interpreter import Interpreter
    from j2c_server.unpack.outputs import OutputsSync
    from j2c_server.unpack.ranks import NodeRank


class _Terminated(BaseException):
    """SIGTERM outside the run (which forwards it to the job): stop, but clean up first."""


def _terminate(_signum: int, _frame: object) -> None:
    summary.signalled("SIGTERM")
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    take_tag()  # before anything is said, and out of the environment the job inherits
    options, user_args = parse_command_line(sys.argv[1:] if argv is None else argv)
    # The default action would end the process on the spot, leaving original-path copies.
    previous = signal.signal(signal.SIGTERM, _terminate)
    code = 1  # what Python exits with when an unexpected error gets out
    try:
        code = unpack_and_run(options, user_args)
    except UnpackError as exc:
        error("failed", exc.message)
        if exc.hint:
            say("hint", exc.hint)  # what to do, right after the error it is about
        code = int(exc.exit_code)
    except KeyboardInterrupt:
        error("failed", "interrupted before the entry point started")
        code = 128 + 2
    except _Terminated:
        error("failed", "stopped by SIGTERM outside the entry point's run")
        code = 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
        summary.emit(code, say)  # the last line, whatever happened
        summary.write_end_file(code)  # proof that j2c-unpack ended by itself (summary.py)
    return code


def unpack_and_run(options: argparse.Namespace, user_args: list[str]) -> int:
    from j2c_server.unpack.cache.node import open_cache
    from j2c_server.unpack.job_secrets import load_secrets, resolve_manifest

    # The credentials the scheduler handed over by reference (never in the job's spec), and a
    # manifest given as env:NAME (a presigned URL), before anything reads either.
    load_secrets()
    options.manifest = resolve_manifest(options.manifest)

    # The node's cache first: it may hold this manifest's plan (no validation, no pydantic).
    cache = open_cache(options.cache_dir, options.cache_max)
    try:
        return _unpack_and_run(options, user_args, cache)
    finally:
        if cache is not None:
            cache.close()  # only now: the entries this job used may be evicted from here on


def _unpack_and_run(options: argparse.Namespace, user_args: list[str], cache: Cache | None) -> int:
    from j2c_server.unpack.fetch import read_manifest
    from j2c_server.unpack.homes import place_layers, release, trust_requested
    from j2c_server.unpack.interpreter import check_python, this_interpreter, venv_interpreter
    from j2c_server.unpack.inventory import report as report_inventory
    from j2c_server.unpack.workdir import workdir_in_use

    # 1-2: what to run, and whether this interpreter can run it at all.
    plans = cache.plans if cache is not None else None
    manifest = read_manifest(options.manifest, plans, options.manifest_digest)
    options.retries, options.index = 0, None  # a sweep's row may ask for re-runs
    if options.variant is not None or options.variant_env or manifest.variants is not None:
        from j2c_server.unpack.variant import (
            fill_placeholders,
            pick_variant,
            variant_index,
            variant_retries,
        )

        index = variant_index(options.variant, options.variant_env)
        manifest = pick_variant(manifest, index)
        if index is not None:
            fill_placeholders(options, index)
            options.retries, options.index = variant_retries(manifest, index), index
    if manifest.files:
        from j2c_server.unpack.bigfiles import check_files

        check_files(manifest.files)  # refused before anything is downloaded
    interpreter, why = venv_interpreter(manifest)
    if why is not None:
        say("venv", why)
    # What this Python holds, for the lab's next preflight (once per interpreter with a cache),
    # said before a mismatch can stop the job.
    # Of the Python the job will run on: the venv's own base where it was bound to that.
    other = interpreter.executable if interpreter != this_interpreter() else None
    said = report_inventory(
        cache.root if cache else None, cache.owners if cache else None, python=other
    )
    if manifest.needs is not None:  # a target the lab did not know: every gap, at once
        from j2c_server.unpack.needs import check_needs

        check_needs(manifest.needs, said)
    check_python(manifest, interpreter)

    with workdir_in_use(options.workdir, keep=options.no_run) as workdir:
        # 3: where the layers go, and room for them there.
        output_dir = _output_dir(options, workdir)
        trust = trust_requested(options.trust_original_paths)
        placement = place_layers(manifest, options.paths, workdir, trust=trust)
        try:
            return _run_placed(
                options, user_args, manifest, interpreter, placement, workdir, output_dir, cache
            )
        finally:
            # Original-path copies are this job's alone: the next job must not find them.
            if not options.no_run:
                release(placement, workdir, output_dir=output_dir)


def _run_placed(
    options: argparse.Namespace,
    user_args: list[str],
    manifest: ManifestPlan,
    interpreter: Interpreter,
    placement: Placement,
    workdir: Path,
    output_dir: Path,
    cache: Cache | None,
) -> int:
    """Phases 3 (room) to 8, once the layers' homes are decided."""
    from j2c_server.unpack.cache.node import Bypass

    prepared = None
    extra_env: dict[str, str] = {}
    if cache is not None:
        try:
            prepared = cache.prepare(
                options.manifest, manifest.layers, placement, interpreter, workdir / "blobs"
            )
        except Bypass as exc:
            warn("cache", f"not used for this job: {exc}")
    if prepared is None:
        python = _prepare_uncached(options.manifest, manifest, placement, interpreter, workdir)
    else:
        placement, python, extra_env = prepared.placement, prepared.python, prepared.env
    if manifest.files:
        from j2c_server.unpack.bigfiles import place_files

        blobs = workdir / "blobs"
        used = cache if prepared is not None else None
        place_files(options.manifest, manifest.files, placement.code, blobs, used)
    return _run_prepared(
        options, user_args, manifest, python, placement, workdir, output_dir, extra_env
    )


def _prepare_uncached(
    manifest_uri: str,
    manifest: ManifestPlan,
    placement: Placement,
    interpreter: Interpreter,
    workdir: Path,
) -> Path:
    """Phases 3 (room) to 6 without a cache: into the workdir and the layers' homes."""
    from j2c_server.unpack.downloads import download_layers
    from j2c_server.unpack.space import check_free_space

    check_free_space(manifest.layers, placement, workdir / "blobs")

    # 4: every layer, verified, before anything is extracted.
    fetched = download_layers(manifest_uri, manifest.layers, workdir / "blobs")

    # 5: extraction, code first (a venv inside the project goes into the code folder).
    _extract_all(fetched, placement)

    # 6: the venv, working at its home with this interpreter.
    return _prepare_venv(placement, interpreter)


def _run_prepared(
    options: argparse.Namespace,
    user_args: list[str],
    manifest: ManifestPlan,
    python: Path,
    placement: Placement,
    workdir: Path,
    output_dir: Path,
    extra_env: dict[str, str],
) -> int:
    """Phases 7 and 8."""
    from j2c_server.unpack.ranks import SINGLE_NODE, node_rank
    from j2c_server.unpack.run import entry_command, job_environment, run_attempts, working_dir
    from j2c_server.unpack.shadows import report_shadowed

    if placement.venv is not None:
        report_shadowed(placement.venv)
    # 7: the entry point, on this node's rank of the job.
    ranked = options.nodes > 1 or options.launcher != "none"
    rank = node_rank(options.nodes, os.environ) if ranked else SINGLE_NODE
    argv = entry_command(manifest, placement.code, python, output_dir, user_args)
    argv = _launched(options, manifest, argv, rank)
    cwd = working_dir(manifest, placement.code)
    if options.no_run:
        say("running", f"skipped (--no-run); prepared in {workdir}")
        return 0
    env = {**job_environment(manifest, placement.venv, output_dir), **extra_env}
    env.setdefault("J2C_ATTEMPT", "1")
    # 7a: a resumed attempt's checkpoint, back where the job left it (restore.py).
    restored = None
    if options.restore:
        from j2c_server.unpack.restore import read_plan, restore, resumed_env

        plan = read_plan(options.restore, options.restore_digest)
        restored = restore(plan, placement.code, options.output_uri)
        env.update(resumed_env(restored, placement.code, cwd))
    stage = Stage("running")
    if ranked:
        env.update(rank.environment(launcher=options.launcher))
        say("running", f"node rank {rank.rank} of {rank.nodes}")
    # 8: the outputs (synced while it runs), whatever the exit code; of a multi-node job, every
    # rank's (rank k > 0 under rank-<k>/, outputs.py); the checkpoint folders are rank 0's.
    outputs = None
    if options.output_uri:
        outputs = _outputs_sync(options, output_dir, placement, rank, cwd)
        if restored is not None and rank.rank == 0:
            plan = restored.plan
            carried = [(item.name, item.size, item.sha256) for item in plan.carried_files]
            outputs.carry(restored.files, carried, plan.carried_entries)
        outputs.start(options.outputs_sync_minutes)
    try:
        code = run_attempts(
            argv,
            env,
            cwd,
            retries=options.retries,
            what=f"variant {options.index}",
            on_signal=outputs.wake if outputs else None,
        )
    finally:
        if outputs is not None:
            outputs.stop()
    stage.done(f"exit code {code}")
    if outputs is not None:
        code = _upload_outputs(outputs, code)
    return code


def _outputs_sync(
    options: argparse.Namespace, output_dir: Path, placement: Placement, rank: NodeRank, cwd: Path
) -> OutputsSync:
    """The outputs to sync: the output dir and the files the job writes into its code folder
    (a snapshot of it now, right before the entry point starts: one lstat a file), and on rank 0
    its checkpoint folders (relative to ``cwd``, the working directory)."""
    from j2c_server.unpack.checkpoints import CheckpointRules
    from j2c_server.unpack.outputs import MB, Caps, OutputsSync, WorkingCopy
    from j2c_server.unpack.written import take_snapshot

    venv = placement.venv
    skip = (venv,) if venv is not None and venv.is_relative_to(placement.code) else ()
    skip = (*skip, output_dir)
    copy = WorkingCopy(placement.code, take_snapshot(placement.code, skip), skip)
    caps = Caps(options.outputs_max_file_mb, options.outputs_max_total_mb)
    rules = None
    if options.checkpoint_dir and rank.rank == 0:
        folders = tuple(
            Path(os.path.relpath(cwd / folder, placement.code)).as_posix()
            for folder in options.checkpoint_dir
        )
        rules = CheckpointRules(
            folders=folders,
            every_s=options.checkpoints_every_s,
            keep_last=options.checkpoints_keep,
            max_bytes=int(options.checkpoints_max_mb * MB),
        )
    return OutputsSync(
        output_dir,
        options.output_uri,
        caps,
        copy,
        rank=rank.rank,
        nodes=rank.nodes,
        checkpoints=rules,
    )


def _launched(
    options: argparse.Namespace, manifest: ManifestPlan, argv: list[str], rank: NodeRank
) -> list[str]:
    """The entry argv as the launcher runs it."""
    from j2c_server.unpack.errors import EntryNotRunnable
    from j2c_server.unpack.ranks import torchrun_command, torchrun_needs_tee

    if options.launcher == "none":
        return argv
    if manifest.entry.kind == "notebook":
        raise EntryNotRunnable(
            "--launcher torchrun runs a script or a module, not a notebook", field="launcher"
        )
    job_id = os.environ.get("J2C_JOB_ID", "")
    tee = torchrun_needs_tee(argv[0])
    if tee is not None:
        say("running", tee)
    nproc = max(1, options.nproc_per_node)
    return torchrun_command(argv[0], argv, rank, nproc, job_id, tee=tee is not None)


def _extract_all(fetched: list[Fetched], placement: Placement) -> None:
    from j2c_server.core.manifest_plan import LayerRole
    from j2c_server.unpack.extract import extract_layer

    stage = Stage("extracting")
    total = 0
    parts = sum(item.layer.role == LayerRole.code for item in fetched)
    done = 0
    base = [(item.layer, item.path) for item in fetched if item.layer.role == LayerRole.base]
    fetched = [item for item in fetched if item.layer.role != LayerRole.base]
    for item in sorted(fetched, key=lambda f: f.layer.role != LayerRole.code):
        role = item.layer.role
        home = placement.homes[role]
        code = role == LayerRole.code
        result = extract_layer(
            item.path,
            home,
            venv=role == LayerRole.venv,
            max_bytes=item.layer.unpacked_size,
            into=code and done > 0,  # the code layer's later parts: into the same folder
        )
        total += result.bytes
        done += code
        what = f"{role.value} layer" + (f" part {done} of {parts}" if code and parts > 1 else "")
        say("extracting", f"{what}: {result.entries} entries into {home}")
    if base and placement.venv is not None:  # lab-base packages, on the venv's path
        from j2c_server.unpack.base_packages import place_base

        total += place_base(placement.venv, base)
    stage.done(f"{byte_size(total)} written ({placement.mode} paths)")


def _prepare_venv(placement: Placement, interpreter: Interpreter) -> Path:
    """The interpreter that runs the job: the venv's, once it is proved to work here."""
    from j2c_server.unpack.relocate import fix_venv, verify_venv

    if placement.venv is None:
        return interpreter.executable
    stage = Stage("relocating")
    changed = fix_venv(placement.venv, interpreter, placement.moves)
    verify_venv(placement.venv)
    stage.done(f"venv at {placement.venv} runs: {changed} files rewritten")
    return placement.venv / "bin" / "python"


def _output_dir(options: argparse.Namespace, workdir: Path) -> Path:
    chosen = options.output_dir or os.environ.get("J2C_OUTPUT_DIR") or workdir / "outputs"
    output_dir = Path(os.path.abspath(chosen))
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalIOError(
            f"cannot create the output dir {output_dir}: {exc.strerror}", field="output_dir"
        ) from None
    return output_dir


def _upload_outputs(outputs: OutputsSync, code: int) -> int:
    """Upload; a failed upload turns a successful run into exit code 73, else it is reported."""
    try:
        outputs.upload()
    except UnpackError as exc:
        error("uploading outputs", str(exc))
        return int(exc.exit_code) if code == 0 else code
    return code


if __name__ == "__main__":
    sys.exit(main())
