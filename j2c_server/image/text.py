"""The image report's words: the same lines in ``j2c submit``, ``--dry-run``, ``%j2c`` and logs.

``report_lines`` returns nothing when the target has everything the job needs at the lab's
versions; otherwise a heading and one line per difference, the worst first.
"""

from __future__ import annotations

from j2c_server.core.units import byte_size, count
from j2c_server.wire.image import ImageReport

SHOWN = 20


def _join(items: list[str]) -> str:
    return ", ".join(items)


def shipping_lines(report: ImageReport) -> list[str]:
    """What of the lab's base ships with the job (image/base_layer.py), and the choices."""
    shipping = report.shipping
    if shipping is None:
        return []
    lines: list[str] = []
    if shipping.enabled and shipping.names:
        names = [label.rsplit(" ", 1)[0] for label in shipping.names]
        over = {label.rsplit(" ", 1)[0] for label in shipping.shipped_conflicts}
        lacks = [name for name in names if name not in over]
        size = byte_size(shipping.bytes)
        if not over:
            lines.append(
                f"  shipping {count(len(names), 'package')} from the lab's base Python that "
                f"{report.target} lacks: {_join(names)} — {size}"
            )
        else:
            image = {v.name: v.image_version for v in report.versions}
            instead = _join(
                [
                    f"{label} over the image's {image.get(label.rsplit(' ', 1)[0], '?')}"
                    for label in shipping.shipped_conflicts
                ]
            )
            what = f"{len(lacks)} that {report.target} lacks ({_join(lacks)}) and " if lacks else ""
            lines.append(
                f"  shipping {count(len(names), 'package')} from the lab's base Python: "
                f"{what}{instead} — {size}"
            )
    elif shipping.off_reason and (report.missing or shipping.shipped_conflicts):
        lines.append(
            f"  not shipped ({shipping.off_reason}): the job cannot import them "
            "(ModuleNotFoundError)"
        )
    chosen = {label.rsplit(" ", 1)[0] for label in shipping.shipped_conflicts}
    for item in report.versions:
        now = "the lab's" if item.name in chosen else "the image's"
        lines.append(
            f"  {item.name}: ship the lab's {item.lab_version} (--base-conflicts ship) or use "
            f"the image's {item.image_version} (--base-conflicts image); now {now} "
            f"({shipping.conflicts})"
        )
    for broken in shipping.breaks_image:
        lines.append(
            f"  error: the lab's version breaks the image's own packages: {broken.by} needs "
            f"{broken.requirement}" + (" (--force-base: shipped anyway)" if shipping.forced else "")
        )
    if shipping.breaks_image and not shipping.forced:
        lines.append("    use --base-conflicts image, or confirm with --force-base")
    if shipping.skipped_files:
        shown = shipping.skipped_files[:10]
        more = len(shipping.skipped_files) - len(shown)
        lines.append(
            "  left out (outside site-packages): "
            + _join(shown)
            + (f" and {more} more" if more else "")
        )
    if shipping.note and shipping.enabled and shipping.names:
        lines.append(f"  note: {shipping.note}")
    return lines


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
    lines.extend(
        f"  {item.imported_by[0]} imports {item.name}: not in the venv, the lab or {report.target}"
        for item in report.unprovided[:SHOWN]
    )
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
    lines.extend(shipping_lines(report))
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
