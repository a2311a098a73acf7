"""The manifest as ``j2c-unpack`` runs it: frozen dataclasses, standard library only.

:class:`j2c_server.wire.manifest.Manifest` (pydantic) is the wire contract and the one validator
of a manifest. ``j2c-unpack`` validates with it once per manifest and node, then works on this plain
copy of what it accepted; a warm start (the node cache holds the plan, ``unpack/cache/plans.py``)
builds the copy from the plan without importing pydantic, whose import and first model cost
more than the rest of a warm start together.

Every field of the pydantic models is here under the same name (``tests/unpack/test_plan.py``
checks both ways), and :func:`ManifestPlan.from_dict` takes a complete ``model_dump`` only:
a missing or unknown key is an error, never a default, so the two cannot drift quietly.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any


class LayerRole(str, Enum):
    code = "code"
    venv = "venv"
    base = "base"  # lab-base distributions the image lacks (format_version 4)


# The newest manifest format this j2c-unpack reads (= wire.manifest.MANIFEST_FORMAT_VERSION,
# checked by a test). Here, without pydantic, so the in-job inventory can say it.
READS_FORMAT_VERSION = 7


class PlanError(ValueError):
    """A plan that is not a complete dump of a validated manifest: validate the manifest."""


def _take(cls: type, data: Any) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    if not isinstance(data, dict) or set(data) != names:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise PlanError(f"{cls.__name__} needs exactly {sorted(names)}, got {got}")
    return data


@dataclass(frozen=True)
class LayerPlan:
    role: LayerRole
    digest: str
    size: int
    files: int
    unpacked_size: int
    source_path: str
    media_type: str
    url: str | None

    @classmethod
    def from_dict(cls, data: Any) -> LayerPlan:
        values = _take(cls, data)
        return cls(**{**values, "role": LayerRole(values["role"])})


@dataclass(frozen=True)
class FilePlan:
    path: str
    digest: str
    size: int
    mode: int
    url: str | None

    @classmethod
    def from_dict(cls, data: Any) -> FilePlan:
        return cls(**_take(cls, data))


@dataclass(frozen=True)
class EntryPlan:
    kind: str  # "script", "module" or "notebook"
    target: str

    def describe(self) -> str:
        return f"-m {self.target}" if self.kind == "module" else self.target


@dataclass(frozen=True)
class VenvPlan:
    python_version: str
    home: str
    include_system_site_packages: bool
    prompt: str | None


@dataclass(frozen=True)
class VariantPlan:
    index: int
    args: list[str]
    env: dict[str, str]
    params: dict[str, str]
    retries: int | None  # re-runs while the entry point exits non-zero (format_version 7)

    @classmethod
    def from_dict(cls, data: Any) -> VariantPlan:
        values = _take(cls, data)
        retries = values["retries"]
        return cls(
            index=int(values["index"]),
            args=[str(arg) for arg in values["args"]],
            env=dict(values["env"]),
            params=dict(values["params"]),
            retries=None if retries is None else int(retries),
        )


@dataclass(frozen=True)
class NeededRequirementPlan:
    by: str
    specifier: str


@dataclass(frozen=True)
class NeededDistPlan:
    name: str
    version: str
    why: list[str]
    requirements: list[NeededRequirementPlan]

    @classmethod
    def from_dict(cls, data: Any) -> NeededDistPlan:
        values = _take(cls, data)
        return cls(
            name=str(values["name"]),
            version=str(values["version"]),
            why=[str(item) for item in values["why"]],
            requirements=[
                NeededRequirementPlan(**_take(NeededRequirementPlan, item))
                for item in values["requirements"]
            ],
        )


@dataclass(frozen=True)
class NeededWheelPlan:
    name: str
    version: str
    tags: list[str]


@dataclass(frozen=True)
class JobNeedsPlan:
    python: str
    lab_libc: str | None
    dists: list[NeededDistPlan]
    wheels: list[NeededWheelPlan]

    @classmethod
    def from_dict(cls, data: Any) -> JobNeedsPlan:
        values = _take(cls, data)
        return cls(
            python=str(values["python"]),
            lab_libc=values["lab_libc"],
            dists=[NeededDistPlan.from_dict(item) for item in values["dists"]],
            wheels=[NeededWheelPlan(**_take(NeededWheelPlan, item)) for item in values["wheels"]],
        )


@dataclass(frozen=True)
class ManifestPlan:
    format_version: int
    created_by: str
    created_at: float
    layers: list[LayerPlan]
    entry: EntryPlan
    args: list[str]
    workdir: str
    env: dict[str, str]
    venv: VenvPlan | None
    source_image: str | None
    files: list[FilePlan] | None
    variants: list[VariantPlan] | None
    needs: JobNeedsPlan | None

    @classmethod
    def from_dict(cls, data: Any) -> ManifestPlan:
        """The plan of ``Manifest.model_dump(mode="json")`` (all fields, defaults included)."""
        values = _take(cls, data)
        try:
            venv = values["venv"]
            files = values["files"]
            variants = values["variants"]
            needs = values["needs"]
            return cls(
                **{
                    **values,
                    "layers": [LayerPlan.from_dict(layer) for layer in values["layers"]],
                    "entry": EntryPlan(**_take(EntryPlan, values["entry"])),
                    "args": [str(arg) for arg in values["args"]],
                    "env": dict(values["env"]),
                    "venv": None if venv is None else VenvPlan(**_take(VenvPlan, venv)),
                    "files": None if files is None else [FilePlan.from_dict(f) for f in files],
                    "variants": None
                    if variants is None
                    else [VariantPlan.from_dict(v) for v in variants],
                    "needs": None if needs is None else JobNeedsPlan.from_dict(needs),
                }
            )
        except (TypeError, ValueError) as exc:  # a role that is no LayerRole, a list that is not
            raise PlanError(f"not a validated manifest: {exc}") from None

    def layer(self, role: LayerRole) -> LayerPlan | None:
        """The first layer of ``role``: the venv, or the code layer's first part."""
        return next((layer for layer in self.layers if layer.role == role), None)

    def code_layers(self) -> list[LayerPlan]:
        """The code layer's parts, in extraction order (several from format_version 3)."""
        return [layer for layer in self.layers if layer.role == LayerRole.code]

    def base_layers(self) -> list[LayerPlan]:
        """The shipped lab-base packages, one layer per lab site folder (format_version 4)."""
        return [layer for layer in self.layers if layer.role == LayerRole.base]

    def variant(self, index: int | None) -> VariantPlan | None:
        """The sweep row ``index`` names; None for a manifest without a variant table.

        A sweep's manifest run without an index, an index outside the table, or an index for a
        manifest that has no table is an error: a variant must never run the base args.
        """
        if self.variants is None:
            if index is not None:
                raise PlanError(f"variant {index} was asked for but the manifest is no sweep's")
            return None
        if index is None:
            raise PlanError(
                f"this manifest holds a sweep of {len(self.variants)} variants: name one "
                "(--variant N or --variant-env VAR)"
            )
        if not 0 <= index < len(self.variants) or self.variants[index].index != index:
            raise PlanError(f"variant {index} is not in the table (0..{len(self.variants) - 1})")
        return self.variants[index]
