"""The image report's words: the same lines in ``j2c submit``, ``--dry-run``, ``%j2c`` and logs.

``report_lines`` returns nothing when the target has everything the job needs at the lab's
versions; otherwise a heading and one line per difference, the worst first.
"""

from __future__ import annotations

from j2c_server.core.units import byte_size, count
from j2c_server.image.models import ImageReport

SHOWN = 20


def _join(items: list[str]) -> str:
    return ", ".join(items)


def report_lines(report: ImageReport | None) -> list[str]:
    if report is None:
        return []
    if not report.known:
        return [report.message or f"{report.target} not known yet: checked when the job starts"]
    lines: list[str] = []
    if report.python:
        lines.append(f"  Python: {report.python}")
    if report.missing:
        total = sum(item.bytes for item in report.missing)
        lines.append(
            f"  missing in the image: {count(len(report.missing), 'package')} from the lab's "
            f"base Python ({byte_size(total)}):"
        )
        lines.extend(
            f"    {item.name} {item.lab_version} ({byte_size(item.bytes)}; {_join(item.needed_by)})"
            for item in report.missing[:SHOWN]
        )
        if len(report.missing) > SHOWN:
            lines.append(f"    … and {len(report.missing) - SHOWN} more")
    for item in report.versions[:SHOWN]:
        lines.append(
            f"  {item.name} {item.lab_version} in the lab, {item.image_version} in the image"
            + (":" if item.broken else "")
        )
        lines.extend(
            f"    {broken.by} needs {broken.requirement}; the image has {item.name} "
            f"{item.image_version}"
            for broken in item.broken
        )
    lines.extend(
        f"  the venv's {item.name} {item.version} will not load: {item.reason}"
        for item in report.wheels[:SHOWN]
    )
    for shadow in report.shadows[:SHOWN]:
        lines.append(
            f"  the venv's {shadow.name} {shadow.venv_version} shadows the image's "
            f"{shadow.image_version}, which {_join(shadow.required_by)} use"
        )
        lines.extend(
            f"    {broken.by} needs {broken.requirement}: the venv's {shadow.name} "
            f"{shadow.venv_version} fails it"
            for broken in shadow.broken
        )
    if not lines:
        return []
    source = {"probe": "probed", "job": "from a job's log", "operator": "from an operator"}
    how = f" ({source[report.source]})" if report.source else ""
    return [f"{report.target} differs from the lab{how}:", *lines]
