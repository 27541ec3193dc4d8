"""Grading a finished debate with a grader model (`[grader]`, paper 004): its final response,
the question as the prompts show it and the ideal answer (the label) filled into the prompt
set's grader template; the verdict is recorded beside the exact scoring (`record.grading`).
A failed request is a grading without a verdict, never a failed debate."""

from __future__ import annotations

from crawdad.errors import BackendError, PromptError
from crawdad.prompts import PromptSet, PromptTemplate, placeholders
from crawdad.protocols.base import DebateSetup
from crawdad.records import DebateRecord, Grading
from crawdad.scoring.verdict import read_verdict
from crawdad.tasks.base import Item

GRADER_VARS = {"input", "submission", "ideal"}


def grading_template(prompts: PromptSet, name: str) -> PromptTemplate:
    """The grader's template of the prompt set, checked to use every variable it is given."""
    template = prompts[name]
    missing = sorted(GRADER_VARS - placeholders(template.text))
    if missing:
        raise PromptError(
            f"the grader template {name}.txt of prompt set {prompts.name!r} does not use "
            f"${', $'.join(missing)}: it needs $input (the question), $submission (the final "
            "response) and $ideal (the ideal answer)"
        )
    return template


async def grade(setup: DebateSetup, item: Item, record: DebateRecord) -> None:
    """Fill `record.grading` with the grader's verdict on the last response (a finished debate
    with a response only)."""
    grader = setup.grader
    shown = [i for i, t in enumerate(record.turns) if t.text.strip()]
    if grader is None or not record.ok or not shown or record.gold is None:
        return  # nothing to grade, or no ideal answer to grade against
    template = grading_template(setup.prompts, setup.grader_template)
    index = shown[-1]
    grading = Grading(
        model=grader.spec.model, template=template.version, turn=index, ideal=record.gold
    )
    prompt = template.fill(
        input=setup.task.show(item), submission=record.turns[index].text, ideal=record.gold
    )
    try:
        reply = await grader.pool.chat(grader.request(prompt, seed=0))
    except BackendError as e:
        grading.reason = f"the grader's request failed: {e}"
        record.grading = grading
        return
    grading.raw = reply.text
    grading.verdict, grading.reason = read_verdict(reply.text)
    grading.prompt_tokens, grading.completion_tokens = reply.prompt_tokens, reply.completion_tokens
    grading.seconds = reply.seconds
    record.grading = grading
