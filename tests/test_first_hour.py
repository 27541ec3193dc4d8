"""Issue 39's misses, each with the test that would have caught it (the first hour of a new
user, from the documentation word for word)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawdad.config import load_config
from crawdad.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

# --- 3: the config how-to's TOML, and errors that blame only what changed the outcome ---------


def test_the_config_how_tos_toml_is_a_valid_config(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "how-to" / "config.md").read_text()
    block = re.search(r"```toml\n(.*?)```", page, flags=re.S)
    assert block is not None
    path = tmp_path / "cfg.toml"
    path.write_text(block.group(1))
    cfg = load_config(path, {"selection": {"limit": 4}}, {("selection", "limit"): "--limit 4"})
    assert len(cfg.agents) >= 2 and cfg.selection.limit == 4


def test_a_flag_that_does_not_change_the_outcome_is_not_blamed(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text('[[agents]]\nname = "a"\nmodel = "m"\n')
    with pytest.raises(ConfigError) as e:
        load_config(path, {"selection": {"limit": 4}}, {("selection", "limit"): "--limit 4"})
    assert f"{path} is not a valid crawdad config" in str(e.value)
    assert "--limit" not in str(e.value) and "together" not in str(e.value)


def test_a_flag_that_makes_the_settings_invalid_is_named(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text('[protocol]\nkind = "solo"\n[[agents]]\nname = "a"\nmodel = "m"\n')
    load_config(path)  # one agent is enough for solo
    with pytest.raises(ConfigError, match=re.escape("--set protocol.kind=crawdad")):
        load_config(
            path,
            {"protocol": {"kind": "crawdad"}},
            {("protocol", "kind"): "--set protocol.kind=crawdad"},
        )
