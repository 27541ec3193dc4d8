"""The generated reference pages (docs/hooks/reference.py) cover every command and option, every
config key and every record field, each with its meaning: a new flag, key or field shows up in
the documentation by itself, and one added without a help text or comment fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[1] / "docs" / "hooks" / "reference.py"


@pytest.fixture(scope="module")
def ref():
    spec = importlib.util.spec_from_file_location("docs_reference", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_command_and_option_is_in_the_cli_page(ref) -> None:
    page = ref.cli_page()
    commands = dict(ref.cli_commands())
    assert {"crawdad run", "crawdad configs", "crawdad data tables", "crawdad demo"} <= set(
        commands
    )
    for name, cmd in commands.items():
        assert f"`{name}`" in page
        for p in cmd.params:
            if p.name == "help" or p.hidden:
                continue
            shown = p.opts[0] if p.param_type_name == "option" else (p.metavar or p.name).upper()
            assert f"`{shown}`" in page, f"{name}: {shown} is missing"
            assert (p.help or "").strip(), f"{name} {shown} has no help text"


def test_every_config_key_has_a_type_default_and_meaning(ref) -> None:
    from crawdad.config import RunConfig

    page = ref.config_page()
    keys = {key: meaning for key, _, _, meaning in ref.model_keys(RunConfig)}
    assert set(RunConfig.model_fields) <= keys.keys()
    assert {"agents[].temperature", "protocol.max_turns", "retry.attempts"} <= keys.keys()
    undocumented = [k for k, meaning in keys.items() if not meaning]
    assert undocumented == []
    for key in keys:
        assert f"| `{key}` |" in page


def test_every_record_field_is_in_the_records_page(ref) -> None:
    from crawdad.records import SCHEMA_VERSION, DebateRecord, RunManifest, Turn

    page = ref.records_page()
    models = ref.record_models()
    assert {DebateRecord, RunManifest, Turn} <= set(models)
    assert f"schema version {SCHEMA_VERSION}" in page
    for model in models:
        assert f"## `{model.__name__}`" in page
        for name, info in model.model_fields.items():
            assert f"| `{name}` |" in page
            assert ref._meaning(model, name, info), f"{model.__name__}.{name} has no meaning"
