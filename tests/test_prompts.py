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
    # The authors' defence instruction (finnvamosi/CRAwDAD, utils.py), verbatim.
    assert (
        "H\n\nYou should carefully consider your opponent's response, and then may defend your "
        "previous answers, or be persuaded to your opponent's solution, as you see fit. You should "
        "make explicit references to your opponent's response.\n\nAfter discussing"
    ) in prompts["defence"].fill(question="Q", history="H")


def test_versions_change_with_text(tmp_path: Path) -> None:
    for p in DEFAULT_DIR.glob("*.*"):
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
    for p in DEFAULT_DIR.glob("*.*"):
        (tmp_path / p.name).write_text(p.read_text())
    (tmp_path / "critique.txt").write_text("no placeholders here $question")
    with pytest.raises(PromptError, match=r"does not use \$history"):
        load_prompts(tmp_path)
    (tmp_path / "critique.txt").write_text("$question $history")
    (tmp_path / "defence.txt").unlink()
    with pytest.raises(PromptError, match="prompt template missing"):
        load_prompts(tmp_path)


def test_ablation_sets_change_only_their_paragraph() -> None:
    paper, no_bc, no_conf = (load_prompts(s) for s in ("paper", "no-be-confident", "no-confidence"))
    values = {"question": "Q", "history": "H"}
    for name in ("critique", "defence"):
        full = paper[name].fill(**values)
        assert "Be confident in your thinking" in full
        cut = no_bc[name].fill(**values)
        assert "Be confident" not in cut and "\n\n\n" not in cut
        assert cut == full.replace(paper.fragments["be_confident"] + "\n\n", "")
        plain = no_conf[name].fill(**values)
        assert "confidence" not in plain and plain.endswith("answer yes or no only.\n")
    assert paper.confidence and not no_conf.confidence
    assert "confidence" not in no_conf["extractor"].fill(response="R")
    # The judge's and the simultaneous prompts take the ablation too (inherited, then filled).
    assert "Be confident" not in no_bc["simultaneous"].fill(**values)


def test_crawdad_v1_set_keeps_the_versions_of_schema_1_runs() -> None:
    v1 = load_prompts("crawdad-v1").versions()
    # As crawdad 0.1 recorded them in every manifest.
    assert v1["initial"] == "initial@97f39e31d975" and v1["defence"] == "defence@d41de4d5ec63"
    history = load_prompts("crawdad-v1").history([("Your opponent's response (round 0)", "T")])
    assert history == "--- Your opponent's response (round 0) ---\nT"


def test_unknown_set_names_the_sets_there_are() -> None:
    with pytest.raises(PromptError, match=r"no-be-confident, no-confidence, paper"):
        load_prompts("no-such-set")


def test_a_set_may_inherit_and_override(tmp_path: Path) -> None:
    (tmp_path / "set.toml").write_text('inherit = "paper"\n[labels]\nopponent = "Rival:"\n')
    (tmp_path / "initial.txt").write_text("Answer this. $question")
    mine = load_prompts(tmp_path)
    assert mine["initial"].fill(question="Q") == "Answer this. Q"
    assert mine["critique"].text == load_prompts()["critique"].text
    assert mine.label("opponent") == "Rival:" and mine.label("own_later") == "Your response:"


def test_a_folder_named_like_a_shipped_set_does_not_shadow_it(tmp_path, monkeypatch) -> None:
    """`runs/paper` made `cd runs && crawdad run ...` read the run folder as the prompt set."""
    from crawdad.prompts import PROMPTS_ROOT, resolve_set

    monkeypatch.chdir(tmp_path)
    (tmp_path / "paper").mkdir()
    (tmp_path / "paper" / "debates.jsonl").write_text("")
    assert resolve_set("paper") == PROMPTS_ROOT / "paper"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "set.toml").write_text('inherit = "paper"\n')
    assert resolve_set("mine") == Path("mine")
