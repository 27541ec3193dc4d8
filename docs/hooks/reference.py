"""The reference pages, generated from the code at build time (never typed, so never stale):

- `reference/cli.md`: every command and option, from typer's click command tree;
- `reference/config.md`: every config key (run configs, experiment files), with its type, default
  and meaning, from the pydantic models and the comments beside their fields;
- `reference/records.md`: every field of what a run folder holds, from `crawdad.records`.

mkdocs calls `on_files` (see `hooks:` in mkdocs.yml); the page builders are plain functions, so
`tests/test_docs_reference.py` checks that they cover every command, option, key and field.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

PAGES = {
    "reference/cli.md": "cli_page",
    "reference/config.md": "config_page",
    "reference/records.md": "records_page",
}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, builder in PAGES.items():
        files.append(File.generated(config, uri, content=globals()[builder]()))
    return files


# --- the command line -------------------------------------------------------------------------


def cli_commands() -> Iterator[tuple[str, Any]]:
    """(full name, command) for every command and group, depth first."""
    import typer

    from crawdad.cli import app

    root = typer.main.get_command(app)

    # typer ships its own click (typer._click): commands and parameters are duck-typed here.
    def walk(cmd: Any, name: str) -> Iterator[tuple[str, Any]]:
        yield name, cmd
        if hasattr(cmd, "commands"):
            for sub in sorted(cmd.commands):
                yield from walk(cmd.commands[sub], f"{name} {sub}")

    yield from walk(root, "crawdad")


def _plain(text: str) -> str:
    """Help text without Rich's escapes (the terminal's help renders "\\[stop]" as "[stop]")."""
    return text.replace("\\[", "[")


def _cell(text: object) -> str:
    return " ".join(_plain(str(text)).split()).replace("|", "\\|")


def _is_argument(p: Any) -> bool:
    return p.param_type_name == "argument"


def _param_row(p: Any) -> str:
    if _is_argument(p):
        name = f"`{(p.metavar or p.name).upper()}`"
    else:
        names = [*p.opts, *p.secondary_opts]
        name = ", ".join(f"`{n}`" for n in names)
    descriptor = getattr(p, "type_descriptor", None)
    annotation = descriptor.annotation if descriptor is not None else str
    kind = "flag" if getattr(p, "is_flag", False) else _type_name(annotation)
    if p.multiple or (_is_argument(p) and p.nargs == -1):
        kind += ", repeatable"
    default = p.default
    shown = "" if default in (None, (), []) or callable(default) else f"`{default}`"
    if p.required:
        shown = "required"
    return f"| {name} | {_cell(kind)} | {shown} | {_cell(getattr(p, 'help', '') or '')} |"


def cli_page() -> str:
    out = [
        "# Command line",
        "",
        "Every command and option of `crawdad`, generated from the command tree "
        "(`crawdad COMMAND --help` prints the same).",
        "",
    ]
    for name, cmd in cli_commands():
        depth = min(name.count(" ") + 1, 3)
        out += [f"{'#' * (depth + 1)} `{name}`", "", _plain(inspect.cleandoc(cmd.help or "")), ""]
        params = [p for p in cmd.params if p.name != "help" and not getattr(p, "hidden", False)]
        if params:
            out += [
                "| argument or option | type | default | meaning |",
                "| --- | --- | --- | --- |",
            ]
            out += [_param_row(p) for p in params]
            out.append("")
    return "\n".join(out)


# --- config keys ------------------------------------------------------------------------------


@functools.cache  # finding a class's source parses its whole module: once per class
def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The comments beside each field in the class's source: the lines just above it and the
    one at the end of its line."""
    try:
        lines, _ = inspect.getsourcelines(model)
    except (OSError, TypeError):
        return {}
    tree = ast.parse(textwrap.dedent("".join(lines)))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    source = textwrap.dedent("".join(lines)).splitlines()
    notes: dict[str, str] = {}
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = []
        i = node.lineno - 2
        while i >= 0 and source[i].strip().startswith("#"):
            above.insert(0, source[i].strip().lstrip("#").strip())
            i -= 1
        end = source[node.end_lineno - 1]
        trailing = end.split("  # ", 1)[1].strip() if "  # " in end else ""
        text = " ".join(x for x in [*above, trailing] if x)
        notes[node.target.id] = text
    return notes


def _meaning(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    if info.description:
        return info.description
    for cls in model.__mro__:
        own = inspect.get_annotations(cls) if isinstance(cls, type) else {}
        if issubclass(cls, BaseModel) and name in own:
            note = _field_comments(cls).get(name, "")
            if note:
                return note
    for sub in _submodels(info.annotation):  # a section: its class's docstring
        if sub.__doc__ and not sub.__doc__.startswith(("A base class", "Usage docs")):
            return inspect.cleandoc(sub.__doc__).split("\n\n")[0]
    return ""


def _type_name(annotation: Any) -> str:
    """A type as a reader writes it: `list[str]`, `int | None`, `'ollama' | 'openai'`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is types.NoneType:
        return "None"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined:
        if info.default_factory is not None:
            try:
                value = info.default_factory()  # type: ignore[call-arg]
            except TypeError:
                return "(computed)"
            if isinstance(value, list) and value and isinstance(value[0], BaseModel):
                return ", ".join(
                    f"`{getattr(v, 'name', '')}` ({getattr(v, 'model', '')})" for v in value
                )
            if isinstance(value, BaseModel):
                return "(its keys' defaults)"
            return "`[]`" if value == [] else "`{}`" if value == {} else f"`{value!r}`"
        return "required"
    value = info.default
    if isinstance(value, BaseModel):
        return "(its keys' defaults)"
    return f"`{value!r}`"


def _submodels(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field holds (itself, or inside a list, dict or union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        if arg is not types.NoneType:
            found += _submodels(arg)
    return found


def model_keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str, str, str]]:
    """(dotted key, type, default, meaning) for every field, nested models walked."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        subs = _submodels(info.annotation)
        yield key, _type_name(info.annotation), _default(info), _meaning(model, name, info)
        for sub in subs:
            if sub is model:
                continue
            inner = "[]" if typing.get_origin(info.annotation) is list else ""
            yield from model_keys(sub, f"{key}{inner}.")


def _keys_table(model: type[BaseModel]) -> list[str]:
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, kind, default, meaning in model_keys(model):
        rows.append(f"| `{key}` | `{_cell(kind)}` | {_cell(default)} | {_cell(meaning)} |")
    return rows


def config_page() -> str:
    from crawdad.config import RunConfig
    from crawdad.run.experiment import ExperimentFile

    return "\n".join(
        [
            "# Config keys",
            "",
            "Every key of a run config (`crawdad run --config FILE`, `--set key=value`), generated "
            "from the pydantic models in `crawdad/config.py`: its type, its default and what it "
            "means. A nested key is written with dots in `--set` (`agents.0.model=qwen3:8b`) and "
            "as a `[table]` in TOML. Unknown keys are refused, with the closest known key named. "
            "`crawdad configs` lists the ready configs; `crawdad configs NAME` prints one.",
            "",
            "## Run config",
            "",
            *_keys_table(RunConfig),
            "",
            "## Experiment file",
            "",
            "An experiment file (`crawdad experiment FILE`) holds run-config keys under `[base]` "
            "and `[variants.NAME]`, and these keys of its own:",
            "",
            *_keys_table(ExperimentFile),
            "",
        ]
    )


# --- records ----------------------------------------------------------------------------------


def record_models() -> list[type[BaseModel]]:
    """Every pydantic model `crawdad.records` defines, in source order."""
    import crawdad.records as records

    found = [
        obj
        for obj in vars(records).values()
        if isinstance(obj, type)
        and issubclass(obj, BaseModel)
        and obj.__module__ == records.__name__
    ]
    return sorted(found, key=lambda m: inspect.getsourcelines(m)[1])


def records_page() -> str:
    import crawdad.records as records

    out = [
        "# Records",
        "",
        f"What a run folder holds, generated from `crawdad/records.py` (schema version "
        f"{records.SCHEMA_VERSION}). `debates.jsonl` holds one `DebateRecord` a line; "
        "`manifest.json` one `RunManifest`. Older schema versions still load. See "
        "[what each record holds](../explanation/records.md) for how they fit together.",
        "",
    ]
    for model in record_models():
        doc = inspect.cleandoc(model.__doc__ or "") if model.__doc__ else ""
        if doc.startswith(("A base class", "Usage docs")):
            doc = ""
        out += [f"## `{model.__name__}`", "", doc, ""]
        out += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
        for name, info in model.model_fields.items():
            out.append(
                f"| `{name}` | `{_cell(_type_name(info.annotation))}` | {_cell(_default(info))} "
                f"| {_cell(_meaning(model, name, info))} |"
            )
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # print a page: python docs/hooks/reference.py config
    import sys

    print(globals()[f"{sys.argv[1]}_page"]())
