"""Experiment files: a base config plus named variants (each a set of overrides), or axes whose
product makes the variants, with exclusions. Each variant is an ordinary RunConfig; running them
is the runner's job (`crawdad.runner.run_experiment`).

    baseline = "paper"
    [base]
    concurrency = 64
    [variants.paper]
    [variants.sc5]
    protocol = { kind = "solo", samples = 5 }
    [axes]
    prompt_set = ["no-confidence", "no-be-confident"]
"""

from __future__ import annotations

import hashlib
import itertools
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crawdad.config import RunConfig, _describe, deep_merge, read_toml
from crawdad.errors import ConfigError

EXPERIMENT = "experiment.json"
VARIANT_NAME = re.compile(r"^[A-Za-z0-9_.=,+-]+$")


class ExperimentFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    baseline: str | None = None  # the variant every other is compared with
    base: dict[str, Any] = Field(default_factory=dict)  # run config keys shared by all
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)  # name -> overrides
    axes: dict[str, list[Any]] = Field(default_factory=dict)  # dotted key -> values
    exclude: list[dict[str, Any]] = Field(default_factory=list)  # dotted key -> value, all match


def nest(dotted: dict[str, Any]) -> dict[str, Any]:
    """{"protocol.kind": "judge"} -> {"protocol": {"kind": "judge"}}"""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _axis_name(key: str, value: Any) -> str:
    text = value if isinstance(value, str) else str(value).lower()
    return f"{key.split('.')[-1]}={text}"


def _excluded(combo: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    return any(all(combo.get(k) == v for k, v in rule.items()) for rule in rules)


def expand(spec: ExperimentFile) -> dict[str, dict[str, Any]]:
    """Variant name -> its overrides (nested), named variants first, then the axes' product."""
    variants = dict(spec.variants)
    if spec.axes:
        keys = list(spec.axes)
        for values in itertools.product(*(spec.axes[k] for k in keys)):
            combo = dict(zip(keys, values, strict=True))
            if _excluded(combo, spec.exclude):
                continue
            name = ",".join(_axis_name(k, v) for k, v in combo.items())
            if name in variants:
                raise ConfigError(f"variant {name!r} is named twice (once by the axes)")
            variants[name] = nest(combo)
    return variants


def load_experiment(path: Path) -> tuple[ExperimentFile, str]:
    """The experiment file and its sha256; errors name the file and the key."""
    data = read_toml(path)
    try:
        spec = ExperimentFile.model_validate(data)
    except ValidationError as e:
        lines = [f"{path} is not a valid crawdad experiment file:"]
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"])
            hint = (
                " (known keys: baseline, base, variants, axes, exclude)"
                if err["type"] == "extra_forbidden"
                else ""
            )
            lines.append(f"  - {loc}: {err['msg']}{hint}")
        raise ConfigError("\n".join(lines)) from None
    return spec, hashlib.sha256(path.read_bytes()).hexdigest()


def variant_configs(
    spec: ExperimentFile, source: str, flags: dict[str, Any] | None = None
) -> dict[str, RunConfig]:
    """Each variant's RunConfig: defaults, then [base], then its overrides, then the command's
    flags (which apply to every variant). The selection belongs to the experiment, not a variant:
    every variant runs on the same questions."""
    variants = expand(spec)
    if not variants:
        raise ConfigError(f"{source} names no variants: add [variants.NAME] tables or [axes]")
    for name, overrides in variants.items():
        if not VARIANT_NAME.match(name):
            raise ConfigError(
                f"{source}: variant name {name!r} must be letters, digits and _ . = , + - "
                "(it names the variant's folder)"
            )
        if "selection" in overrides:
            raise ConfigError(
                f"{source}: variant {name!r} sets a selection; every variant runs on the same "
                "questions, so set it in [base] or with the command's flags"
            )
    if spec.baseline is not None and spec.baseline not in variants:
        raise ConfigError(
            f"{source}: baseline {spec.baseline!r} is not a variant (variants: "
            f"{', '.join(variants)})"
        )
    configs = {}
    for name, overrides in variants.items():
        data = deep_merge(deep_merge(spec.base, overrides), flags or {})
        try:
            configs[name] = RunConfig.model_validate(data)
        except ValidationError as e:
            raise ConfigError(_describe(e, f"{source}, variant {name!r},")) from None
    return configs
