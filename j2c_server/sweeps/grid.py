"""A sweep's variants from its spec: the cross product or the explicit list, each with its args
and env filled in from ``{name}`` templates; every bad grid is an ``InvalidInput`` on ``sweep``.

Pure (no I/O): the service expands once at send time and the variant table it writes into the
manifest is what every variant runs, so an edit in the lab afterwards never reaches them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

from j2c_server.core.errors import InvalidInput
from j2c_server.wire.manifest import Variant
from j2c_server.wire.sweep import SweepSpec

# ``{name}`` is a placeholder; ``{{`` and ``}}`` are literal braces.
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _bad(message: str) -> InvalidInput:
    return InvalidInput(f"sweep: {message}", field="sweep")


def placeholders(template: str) -> list[str]:
    """The names ``template`` uses, in order; a malformed placeholder is an error."""
    names: list[str] = []
    for match in _TOKEN.finditer(template):
        name = match.group(1)
        if name is None:
            continue
        if not _NAME.match(name):
            raise _bad(f"{{{name}}} in {template!r} is not a placeholder (use {{{{ for a brace)")
        names.append(name)
    rest = _TOKEN.sub("", template)
    if "{" in rest or "}" in rest:
        raise _bad(f"unbalanced brace in {template!r} (write {{{{ or }}}} for a literal one)")
    return names


def fill(template: str, params: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return params[match.group(1)]

    return _TOKEN.sub(one, template)


def _rows(spec: SweepSpec) -> tuple[list[str], list[tuple[dict[str, str], dict[str, str]]]]:
    if spec.grid and spec.variants:
        raise _bad("give a grid or a list of variants, not both")
    if spec.grid:
        for name, values in spec.grid.items():
            if not values:
                raise _bad(f"{name!r} has no values")
            if len(set(values)) != len(values):
                raise _bad(f"{name!r} lists a value twice")
        keys = list(spec.grid)
        product = itertools.product(*(spec.grid[key] for key in keys))
        return keys, [(dict(zip(keys, values, strict=True)), {}) for values in product]
    if not spec.variants:
        raise _bad("no variants: give a grid (name → values) or a list of variants")
    keys = list(dict.fromkeys(name for v in spec.variants for name in v.params))
    return keys, [(dict(v.params), dict(v.env)) for v in spec.variants]


def expand(
    spec: SweepSpec,
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    max_variants: int,
) -> tuple[list[str], list[Variant]]:
    """The swept names and the variant table of ``spec`` over the base ``args`` and ``env``.

    Each variant's args are the base args with its values filled in; its env holds the sweep's
    env templates and its own, filled in (the base env stays the manifest's). A placeholder no
    variant defines, a swept name nothing uses, two identical variants and a sweep over
    ``max_variants`` are errors.
    """
    keys, rows = _rows(spec)
    if len(rows) > max_variants:
        raise _bad(
            f"{len(rows)} variants is more than the limit of {max_variants} "
            "(setting sweep.max_variants)"
        )
    used = {name for arg in args for name in placeholders(arg)}
    used |= {name for value in spec.env.values() for name in placeholders(value)}
    used |= {name for _, own in rows for value in own.values() for name in placeholders(value)}
    unused = [key for key in keys if key not in used]
    if unused:
        raise _bad(
            f"{', '.join(unused)} is swept but no argument or env value uses "
            f"{', '.join('{' + u + '}' for u in unused)}"
        )
    table: list[Variant] = []
    seen: set[tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = set()
    for index, (params, own_env) in enumerate(rows):
        names = (
            {n for a in args for n in placeholders(a)}
            | {n for v in spec.env.values() for n in placeholders(v)}
            | {n for v in own_env.values() for n in placeholders(v)}
        )
        missing = sorted(names - set(params))
        if missing:
            raise _bad(
                f"variant {index} has no value for {', '.join('{' + m + '}' for m in missing)}"
            )
        row_env = {k: fill(v, params) for k, v in {**spec.env, **own_env}.items()}
        row_args = [fill(arg, params) for arg in args]
        identity = (tuple(row_args), tuple(sorted({**env, **row_env}.items())))
        if identity in seen:
            raise _bad(f"variant {index} runs exactly like an earlier one")
        seen.add(identity)
        retries = spec.retries or None  # absent when none: older j2c-unpacks read the table
        table.append(
            Variant(index=index, args=row_args, env=row_env, params=params, retries=retries)
        )
    return keys, table
