"""CLadder's yes/no causal questions, the first task: an item is a `Question` (its story, the
numbers it states and its causal model), shown as background + given information + question,
answered yes or no with a confidence, and scored against its label.

With `[scoring] steps = true`, each debater turn's CausalCoT steps are read by the extractor and
scored against the question's causal model (`crawdad.scoring.step_reading`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crawdad.backends.base import ChatResult
from crawdad.config import SelectionConfig, TableLimits
from crawdad.data.questions import Dataset, Question, load_cladder, select
from crawdad.records import Turn
from crawdad.scoring.step_reading import extract_steps, score_call
from crawdad.tasks.base import Ask
from crawdad.tasks.yes_no import YesNoAnswers


class CladderTask(YesNoAnswers):
    name = "cladder"
    prompt_set = "paper"
    report_sections: tuple[str, ...] = ("crawdad.analysis.tasks.cladder",)

    def load(
        self, path: Path, questions_file: str | None = None, *, limits: TableLimits | None = None
    ) -> Dataset:
        return load_cladder(path, questions_file)

    def select(self, dataset: Dataset, selection: SelectionConfig, seed: int) -> Dataset:
        return select(dataset, selection, seed)

    def show(self, item: Question) -> str:
        return item.block

    def record_fields(self, item: Question) -> dict[str, Any]:
        return {
            "desc_id": item.desc_id,
            "gold": item.answer,
            "rung": item.rung,
            "query_type": item.query_type,
            "alignment": item.alignment,
            "story_id": item.story_id,
            "graph_id": item.graph_id,
        }

    async def score_turn(
        self, ask: Ask, model: str, item: Question, turn: Turn, result: ChatResult
    ) -> None:
        turn.steps = await extract_steps(ask, model, item, result)
        if item.causal is not None:
            for call in turn.tool_calls:
                if call.arguments:
                    call.scores = score_call(item.causal, call.arguments, call.result)
