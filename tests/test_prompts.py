from pathlib import Path

import pytest

from crawdad.errors import PromptError
from crawdad.prompts import DEFAULT_DIR, load_prompts


def test_paper_prompts_fill() -> None:
    prompts = load_prompts()
    text = prompts["initial"].fill(question="Q-BLOCK")
    assert text.startswith("You will be asked a causal reasoning question.")
    assert (
        "Step 7) Give a final yes/no answer to the question.\n\nQ-BLOCK\n\nThere is an identifiable"
        in text
    )
    debate = prompts["critique"].fill(question="Q", history="H")
    assert (
        "Q\n\nThere is an identifiable" in debate
        and "H\n\nCarefully read the causal query, then scrutinize" in debate
    )
    assert "defend your answer" in prompts["defence"].fill(question="Q", history="H")


def test_versions_change_with_text(tmp_path: Path) -> None:
    for p in DEFAULT_DIR.glob("*.txt"):
        (tmp_path / p.name).write_text(p.read_text())
    before = load_prompts(tmp_path).versions()
    (tmp_path / "initial.txt").write_text((tmp_path / "initial.txt").read_text() + "\nBe brief.")
    after = load_prompts(tmp_path).versions()
    assert before["initial"] != after["initial"] and before["critique"] == after["critique"]
    assert after["initial"].startswith("initial@") and len(after["initial"]) == len("initial@") + 12


def test_missing_variable_is_an_error(tmp_path: Path) -> None:
    prompts = load_prompts()
    with pytest.raises(PromptError, match=r"needs \$history"):
        prompts["critique"].fill(question="Q")
    for p in DEFAULT_DIR.glob("*.txt"):
        (tmp_path / p.name).write_text(p.read_text())
    (tmp_path / "critique.txt").write_text("no placeholders here $question")
    with pytest.raises(PromptError, match=r"does not use \$history"):
        load_prompts(tmp_path)
    (tmp_path / "critique.txt").write_text("$question $history")
    (tmp_path / "defence.txt").unlink()
    with pytest.raises(PromptError, match="prompt template missing"):
        load_prompts(tmp_path)
