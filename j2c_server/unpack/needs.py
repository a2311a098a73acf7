"""What the job needs of this interpreter, checked before the entry point (manifest format 6).

When the lab sent the job to a target it knew nothing of, the manifest carries the list
(``needs``, image/job_needs.py): each lab-base distribution the job takes from its base Python,
with the lab's version and every requirement the job's packages put on it, and the venv's
compiled wheels by tag. Here it meets this interpreter's inventory (inventory.py), and every gap
is said at once, not one ``ModuleNotFoundError`` per round trip:

- missing here; here at a version that fails a requirement ("scipy 1.17.1 needs numpy>=1.25.2");
- the venv made for another Python minor (then interpreter.py stops the job, exit 69);
- a compiled wheel whose tags this Python or platform cannot load (glibc, machine, ABI).

Any of these stops the job before anything is downloaded (exit 72, errors.py), unless the job
says ``J2C_UNPACK_NEEDS=warn`` (then it runs, the list said) or ``off``. A version that differs
but meets every requirement is said and the job runs. Versions and tags are ``packaging``'s
(wheels.py). With the node cache, a check that passed is remembered for this
interpreter and this list (``<cache>/inventory/needs-<hash>``): a warm start reads no metadata.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from j2c_server.core.j2c_lines import Level
from j2c_server.core.units import count
from j2c_server.unpack.errors import NeedsNotMet
from j2c_server.unpack.inventory import Said, normalize
from j2c_server.unpack.log import say, warn
from j2c_server.unpack.wheels import Runtime, wheel_problem

NEEDS_ENV = "J2C_UNPACK_NEEDS"
MODES = ("stop", "warn", "off")
SHOWN = 50  # lines of one kind, at most


@dataclass
class Gaps:
    python: str | None = None  # the venv's Python minor against this one's
    missing: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # here at a version that fails a requirement
    wheels: list[str] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)  # another version, every requirement holds

    @property
    def stopping(self) -> bool:
        return bool(self.python or self.missing or self.broken or self.wheels)


def _holds(version: str, specifier: str) -> bool:
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except (InvalidVersion, InvalidSpecifier):
        return True  # a version this cannot read is not ours to judge (as the lab's check)


def find_gaps(needs: Any, inventory: dict[str, Any]) -> Gaps:
    """``needs`` (the manifest plan's ``JobNeedsPlan``) against ``inventory`` (inventory.py's
    data): every difference, in the list's order."""
    gaps = Gaps()
    here = {normalize(d["name"]): str(d["version"]) for d in inventory.get("distributions", [])}
    python = inventory.get("python", {})
    platform = inventory.get("platform", {})
    version = str(python.get("version", ""))
    minor = ".".join(version.split(".")[:2])
    if needs.python and minor and needs.python != minor:
        gaps.python = f"the venv was made with Python {needs.python}; this one is {version}"
    for dist in needs.dists:
        theirs = here.get(normalize(dist.name))
        why = ", ".join(dist.why)
        if theirs is None:
            gaps.missing.append(f"{dist.name} (the lab has {dist.version}; {why})")
            continue
        failing = [r for r in dist.requirements if not _holds(theirs, r.specifier)]
        for req in failing:
            gaps.broken.append(
                f"{dist.name} {theirs} here, {dist.version} in the lab: {req.by} needs "
                f"{dist.name}{req.specifier}"
            )
        if not failing and theirs != dist.version:
            gaps.differ.append(
                f"{dist.name} {theirs} here, {dist.version} in the lab (every requirement on it "
                "holds)"
            )
    runtime = Runtime(
        python_version=version,
        implementation=str(python.get("implementation", "cpython")),
        machine=str(platform.get("machine", "")),
        libc=str(platform.get("libc", "unknown")),
        libc_version=str(platform.get("libc_version", "")),
    )
    for wheel in needs.wheels:
        why_not = wheel_problem(tuple(wheel.tags), runtime, needs.lab_libc)
        if why_not is not None:
            gaps.wheels.append(f"the venv's {wheel.name} {wheel.version} will not load: {why_not}")
    return gaps


def _lines(gaps: Gaps) -> list[str]:
    lines: list[str] = []
    if gaps.python:
        lines.append(f"  Python: {gaps.python}")
    if gaps.missing:
        lines.append(f"  missing here: {count(len(gaps.missing), 'package')} from the lab's base:")
        lines.extend(f"    {item}" for item in gaps.missing[:SHOWN])
    for kind in (gaps.broken, gaps.wheels, gaps.differ):
        lines.extend(f"  {item}" for item in kind[:SHOWN])
    longest = max(len(gaps.missing), len(gaps.broken), len(gaps.wheels), len(gaps.differ))
    if longest > SHOWN:
        lines.append(f"  (at most {SHOWN} lines of each kind shown)")
    return lines


def _mode() -> str:
    mode = os.environ.get(NEEDS_ENV, "").strip().lower() or "stop"
    if mode not in MODES:
        warn("needs", f"{NEEDS_ENV}={mode!r} is not one of {', '.join(MODES)}: stop")
        return "stop"
    return mode


def _memo_name(needs: Any, fingerprint: str) -> str:
    text = json.dumps(dataclasses.asdict(needs), sort_keys=True)
    return "needs-" + hashlib.sha256(f"{fingerprint}\0{text}".encode()).hexdigest()[:32]


def check_needs(needs: Any, said: Said) -> None:
    """Say every gap between ``needs`` and this interpreter; raise NeedsNotMet when the job
    cannot run as sent (a Python mismatch is left to interpreter.py's check, said here too)."""
    if needs is None:
        return
    mode = _mode()
    if mode == "off":
        return
    memo = None
    if said.kept is not None and said.fingerprint is not None:
        memo = said.kept.parent / _memo_name(needs, said.fingerprint)
        if os.path.lexists(memo):
            return  # this list passed on this interpreter before: nothing read
    gaps = find_gaps(needs, said.inventory())
    lines = _lines(gaps)
    # Gaps that stop the job are errors; versions that differ, or gaps run with anyway, warnings.
    level: Level = "error" if gaps.stopping and mode != "warn" else "warning"
    total = len(needs.dists)
    if not lines:
        say("needs", f"all {count(total, 'distribution')} the job needs from this Python are here")
    elif not gaps.stopping:
        warn("needs", "the job runs; some versions differ from the lab's:")
    else:
        say("needs", "this Python lacks what the job needs (every gap, at once):", level)
    for line in lines:
        say("needs", line, level)
    if not gaps.stopping:
        if memo is not None:
            with contextlib.suppress(OSError):  # else checked again next time
                os.close(os.open(memo, os.O_WRONLY | os.O_CREAT, 0o600))
        return
    if gaps.python:
        return  # interpreter.py stops it next, with its own exit code (69)
    if mode == "warn":
        warn("needs", f"{NEEDS_ENV}=warn: running anyway")
        return
    problems = len(gaps.missing) + len(gaps.broken) + len(gaps.wheels)
    raise NeedsNotMet(
        f"stopped before the entry point: {count(problems, 'gap')} between what the job needs "
        "and this Python (listed above)",
        field="needs",
        hint="send the job again: the lab learns this image from the job's inventory line and "
        "then ships the lab-base packages it lacks; or install them in the image; or "
        f"set {NEEDS_ENV}=warn in the job's env to run it anyway",
    )
