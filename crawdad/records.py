"""What a run writes to disk: one pydantic model per thing, with a schema version.

A line of `debates.jsonl` is `DebateRecord.model_dump_json()`; `manifest.json` is a `RunManifest`.
The analysis reads only these files, so everything it needs lives here.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# 2: protocols (kind, prompt set, what each turn saw, judge/sample/revision turns).
# 3: tasks (`task`, the item's own descriptors in `item`; answers are the task's: CLadder's yes/no,
#    a pair's yes/no, a graph's edge list; CLadder's descriptors optional for other tasks).
# 4: records that no model made: protocol "algorithm" (a statistical discovery baseline, the
#    algorithm and its parameters in `item`), ending "computed"; protocol "coding" (MAC's coding
#    agents: each turn's plan run by an algorithm, its tool call "run_algorithm"); questions
#    answered from data (tasks cladder-data*, the perfect estimator's answer in `item`) and the
#    pipeline protocol (LLM4Causal): roles task and interpretation, its steps in `pipeline`, tool
#    calls crawdad made itself (mode "pipeline").
# 5: the manifest's `served`: what answered each role (server software and version, the model's
#    build), asked once at the start of every session; records unchanged.
# 6: the pipeline protocol's task is LLM4Causal's JSON (causal_problem, dataset, treatment,
#    response, mediator, condition; crawdad's edges); `extraction` scores its keys the paper's
#    way (soft match), `extraction_exact` by exact match; MA's second call in `more_calls`.
#    Version 4 and 5 pipeline steps keep their CLadder keys (task_type, outcome, ...), scored
#    exactly, with every unused field counted right. And the judge protocol's sides
#    (`Turn.side`: MAC's affirmative opens with its own answer, a negative's `stance` is the
#    answer it argues for) and who a follow-up question is for (`Turn.followup_to`); older
#    lines load with neither (every debater answered a question). And "uncertain" as an agent's answer to a CLadder question, where the prompt set allows it
#    (`uncertain = true`: the Causal Agent's setting, paper 001); the label stays yes or no.
#    `grading`: a grader model's verdict on the final response against the ideal answer
#    (`[grader]`, paper 004), beside the exact scoring; None when no grader ran.
# 7: a question without an exact answer (a table of the user's own, `crawdad data own`): `gold`
#    is null, and scored nowhere; a data question's `alignment` may be null (a real table has no
#    CLadder story alignment). Nothing else changed.
# 8: the run works through its questions in an order drawn from its seed, and `limit` takes the
#    first N of it (before: the first N of the file); a folder made before resumes in file order
#    (`store.recorded_order`). Lines are unchanged.
# 9: the manifest's `stop_history`: the stopping rules a run went through, where `--force` changed
#    its rule on resume (empty: the rule never changed). Lines are unchanged.
# 10: the manifest's stopping rule (`stop`) names its `target`: "models" (the default: the
#    models' expected accuracy, an i.i.d. sequence) or "run" (this full run); a `stop` written
#    before has none and is read as "run", what it was. Lines are unchanged.
# 11: the manifest's `started`: each server crawdad started itself (its exact command, the
#    engine's version, the weights' hash or revision, the GPUs and the memory plan), and
#    `servers/restarts.jsonl` (`ServerRestart`): each restart of one. Lines are unchanged.
# 12: what served a run, proven: `StartedServer.pid`, `.port` (a taken planned port is moved)
#    and `.proven_by` ("api key", "socket"); `ServerRestart.silent_for` (how long the server
#    showed no sign of life before crawdad acted; its `downtime` now counts from its last sign
#    of life); the experiment manifest's questions (`selection`, `selection_history`: part of a
#    stopped experiment's identity) and its stopping rule's `method` ("test": sequential tests
#    by betting decide; a `stop` written before has none and is read as "cs", the sequence's
#    edges, what it was). Lines are unchanged.
# Version 1 to 11 lines still load: every field added since has a default that means what they did.
SCHEMA_VERSION = 12

# Ranges, by meaning (checked since version 7's crawdad; no line a crawdad wrote lies outside
# them, so the schema version is unchanged). Every reader of records (the analysis, the viewer,
# `crawdad show`, the notebook API, resume) validates lines with these models, so a value out of
# range never reaches a table: the line is named and left out.
MAX_COUNT = 2**53  # tokens, attempts, indices: no real count is larger (and a float holds it)
MAX_SECONDS = 1e9  # about 32 years: no request or debate lasts longer
Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]  # a confidence, 0-1
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]  # tokens, attempts, rounds, indices
Seconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]  # a duration
Rung = Annotated[int, Field(ge=1, le=3)]  # CLadder's rungs of the ladder of causation
Version = Annotated[int, Field(ge=1, le=SCHEMA_VERSION)]  # a line of a later crawdad is refused

Answer = Literal["yes", "no"]
YES_NO = ("yes", "no")
# An answer that is neither: the agent says the question cannot be decided (only where the prompt
# set allows it). Scored as the Causal Agent scores it: against a yes/no label, wrong.
UNCERTAIN = "uncertain"
Alignment = Literal["commonsense", "anticommonsense", "nonsense"]
# initial: round 0 of a debate (or a simultaneous round 0); critique / defence: later turns of the
# crawdad protocol; argument: a debater's later turn before a judge; verdict: the judge's turn;
# revision: a later simultaneous round; sample: one independent answer of a solo run; task and
# interpretation: the pipeline's step 1 (the question as a structured task) and step 3.
Role = Literal[
    "initial",
    "critique",
    "defence",
    "argument",
    "verdict",
    "revision",
    "sample",
    "task",
    "interpretation",
]
# algorithm: no model speaks; a causal discovery algorithm's graph (crawdad.run.baseline).
Protocol = Literal["crawdad", "judge", "simultaneous", "solo", "coding", "algorithm", "pipeline"]
# Protocols whose agents answer alone, never seeing another's answer: their answers can agree,
# but no consensus was reached (the report and the viewer word "consensus" so).
ALONE: frozenset[str] = frozenset({"solo"})
# "stop": the model ended its answer; "length": the token budget ran out; "loop": crawdad stopped a
# response that repeated itself; "timeout": the time budget ran out; "error": the request failed.
StopReason = Literal["stop", "length", "loop", "timeout", "error"]
ExtractionMethod = Literal["strict", "tolerant", "none"]
# consensus: agents agreed (early stop); cap: the response or round cap was reached; verdict: the
# judge decided before the cap; samples: a solo run's samples are all in; computed: an algorithm
# gave its graph (no debate); steps: the pipeline's steps are done; error: failed.
DebateEnd = Literal["consensus", "cap", "verdict", "samples", "computed", "steps", "error"]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Extraction(Record):
    """How the answer and confidence of one response were got from the extractor model."""

    # "strict": valid JSON per schema; "tolerant": repaired; "none": failed.
    method: ExtractionMethod
    model: str  # the extractor model
    raw: str = ""  # the extractor's reply, verbatim
    reason: str | None = None  # why answer or confidence is null
    prompt_tokens: Count | None = None  # tokens of the prompt, as the server counted them
    completion_tokens: Count | None = None  # tokens generated
    seconds: Seconds = 0.0  # wall time of the request
    shared: bool = False  # the extractor's reply came from an experiment's response store


class Grading(Record):
    """A grader model's verdict on a debate's final response against the ideal answer (paper
    004's model-graded evaluation, `[grader]`): recorded beside the exact scoring."""

    model: str  # the grader model
    template: str  # "name@sha256[:12]" of the grader's prompt template
    turn: Count  # index (into the record's turns) of the response graded: the last one
    ideal: str  # the ideal answer it was graded against (CLadder: the label)
    raw: str = ""  # the grader's reply, verbatim
    # True: "Y", the submission matches the ideal answer; False: "N"; None: no verdict read.
    verdict: bool | None = None
    reason: str | None = None  # why there is no verdict (unreadable reply, failed request)
    prompt_tokens: Count | None = None  # tokens of the prompt
    completion_tokens: Count | None = None  # tokens generated
    seconds: Seconds = 0.0  # wall time of the request


class StepNumber(Record):
    event: str  # as the response wrote it, in the question's symbols: "P(Y=1 | X=0)"
    value: float  # the number written


class StepScores(Record):
    """A response's CausalCoT steps against the causal engine; None: the step was not shown."""

    graph: bool | None = None  # the edges are the model's
    query_type: bool | None = None  # the query type is the question's
    numbers: bool | None = None  # every number read is the question's (to its rounding)
    value: bool | None = None  # the result is within 0.01 of the exact quantity
    # The first step that went wrong, in CausalCoT's order.
    first_wrong: Literal["graph", "query_type", "numbers", "value"] | None = None


class StepExtraction(Record):
    """The second extraction of step scoring (`[scoring] steps = true`)."""

    # Strict: the reply parsed as asked; tolerant: read from a looser reply; none: nothing read.
    method: ExtractionMethod
    model: str  # the extractor model
    raw: str = ""  # the extractor's reply, verbatim
    reason: str | None = None  # why nothing could be read
    edges: list[str] = Field(default_factory=list)  # "X->V2"
    query_type: str | None = None  # the query type the response names
    estimand: str | None = None  # the estimand it writes
    numbers: list[StepNumber] = Field(default_factory=list)  # the numbers it read from the question
    result: float | None = None  # the value it computed
    scores: StepScores | None = None  # None: the question has no causal model to score against
    prompt_tokens: Count | None = None  # tokens of the prompt
    completion_tokens: Count | None = None  # tokens generated
    seconds: Seconds = 0.0  # wall time of the request


# native: the server's tool calls; text: JSON in the answer; pipeline: crawdad ran the tool on
# the task the model wrote (the pipeline protocol's step 2), no model in the loop.
ToolMode = Literal["native", "text", "pipeline"]


class ToolCall(Record):
    """One call of a tool in a turn: what the model asked, what it got back, how long it took.
    The result entered only the caller's own conversation, never another agent's."""

    name: str  # the function the model named (possibly not a known tool: then malformed)
    mode: ToolMode  # native (the server's tool calling) or text (a JSON call in the answer)
    id: str | None = None  # the server's call id (OpenAI-compatible servers)
    generation: Count = 0  # which request of the turn made the call (0: the first)
    raw: str = ""  # the arguments as the model wrote them (JSON text)
    arguments: dict[str, Any] | None = None  # parsed; None when they were not a JSON object
    result: Any = None  # the calculator's value, when it computed one
    error: str | None = None  # what the model was told instead of a result
    # The call could not be read (not JSON, unknown tool, arguments not of the schema):
    # counted apart from calls the calculator refused (missing or inconsistent numbers).
    malformed: bool = False
    seconds: Seconds = 0.0  # compute time of the call, in its worker
    # With step scoring on: whether the call carried the question's graph and numbers (and a
    # value within 0.01 of the exact one), scored by the causal engine as the steps are.
    scores: StepScores | None = None


class PipelineRun(Record):
    """One agent's pass through the pipeline protocol (LLM4Causal's three steps), scored step
    by step: the task it extracted against the question's, the tool's result against the
    result of the question's own task, its answer against what that result implies."""

    agent: str  # the agent whose pipeline this is
    # Step 1: the structured task read from the model's JSON (LLM4Causal's keys since schema
    # 6); None when it could not be read.
    task: dict[str, Any] | None = None
    task_error: str | None = None  # why it could not be read
    # Key by key (those the question's task has), whether the model retrieved it: the causal
    # task and dataset exactly, the rest by the paper's soft match; {} when unreadable.
    extraction: dict[str, bool] = Field(default_factory=dict)
    # The same keys, every one by exact match (schema 6; {} before).
    extraction_exact: dict[str, bool] = Field(default_factory=dict)
    # Step 2: the data tool crawdad ran with that task (None when there was no task).
    call: ToolCall | None = None
    # Further calls of a task whose tool reports several quantities (MA: the indirect effect
    # after the direct one).
    more_calls: list[ToolCall] = Field(default_factory=list)
    # Whether its results hold the result of the question's own task (the quantity it needs);
    # None when unscored (no result to compare).
    tool_correct: bool | None = None
    # The answer a correct reading of the question's own result gives (CLadder's rules); None
    # for answers that do not come from a number (backadj, collider_bias, det-counterfactual).
    implied_answer: str | None = None
    # Step 3: the model's answer, and whether it reads a correct tool result right (scored
    # only when `tool_correct` and `implied_answer` are set).
    answer: str | None = None
    interpretation_correct: bool | None = None  # step 3's answer is the implied one


class Turn(Record):
    """One response of one agent in one debate."""

    round: Count  # 0-based: 0 is the first speaker's initial answer (see each protocol)
    agent: str  # agent name from the config, e.g. "qwen3"; "judge" for the judge
    model: str  # served model name, e.g. "qwen3:32b"
    role: Role  # what the turn is for: initial, critique, defence, argument, verdict, ...
    template: str  # "name@sha256[:12]" of the prompt template used
    prompt_sha256: str  # of the full rendered prompt (the prompt itself when store_prompts is on)
    prompt: str | None = None  # the rendered prompt (only with protocol.store_prompts)
    # Indices (into the record's turns) of the earlier turns whose final text this prompt showed;
    # None in schema 1 records, where every earlier turn was shown.
    seen: list[Count] | None = None
    stance: Answer | None = None  # the answer this debater was told to argue (judge protocol)
    # The judge protocol's side: the affirmative opens with its own answer (no stance under MAC's
    # sides); a negative argues against it. None: no sides, or a record before schema 6.
    side: Literal["affirmative", "negative"] | None = None
    sample: Count | None = None  # which independent sample of this agent (solo)
    followup: str | None = None  # the judge's follow-up question, when it asked one
    # The debaters the follow-up question is for (they alone answer it), in speaking order;
    # None with a question: every debater (records before schema 6).
    followup_to: list[str] | None = None
    endpoint: str = ""  # base URL that served the request
    thinking: str = ""  # reasoning trace; stored, never shown to the opponent
    text: str = ""  # final text; the only part that enters the history
    answer: str | None = None  # the task's answer (CLadder: "yes" / "no")
    confidence: Share | None = None  # the extracted confidence, 0-1
    extraction: Extraction | None = None
    steps: StepExtraction | None = None  # step scoring only
    prompt_tokens: Count | None = None  # tokens of the prompt, as the server counted them
    completion_tokens: Count | None = None  # tokens generated, thinking included
    seconds: Seconds = 0.0  # wall time of the generation, as seen by crawdad
    server_seconds: Seconds | None = None  # generation time reported by the server, if it does
    stop_reason: StopReason = "stop"  # stop, length (max_tokens), loop, timeout or error
    num_ctx: Count | None = None  # context window requested (Ollama)
    attempts: Count = 1  # requests made for this turn, retries included
    # Served from an experiment's response store: the same request (model, prompt, sampling
    # settings, seed) was already answered for another variant; the turn is complete all the same.
    shared: bool = False
    error: str | None = None  # what failed in this turn
    started_at: datetime | None = None  # when the request was sent (UTC)
    # The tools this turn could call and how (None: no tools); every call, in order.
    tool_mode: ToolMode | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)


class DebateRecord(Record):
    """One finished (or failed) debate over one question. One line of debates.jsonl."""

    schema_version: Version = SCHEMA_VERSION  # the version of this schema the line was written in
    task: str = "cladder"  # crawdad.tasks: what the item is and how answers are scored
    question_id: int | str  # the item's id, whatever the task
    desc_id: str | None = None  # CLadder's description id
    # The right answer, in the task's form (CLadder: "yes" / "no"); None: the question has no
    # exact answer (schema 7: a table of the user's own), so nothing scores this record.
    gold: str | None
    rung: Rung | None = None  # CLadder's descriptors: set for every CLadder question
    query_type: str | None = None  # CLadder's query type (ate, ett, nde, ...)
    alignment: Alignment | None = None  # commonsense, anticommonsense or nonsense
    story_id: str | None = None  # the CLadder story
    graph_id: str | None = None  # the causal graph's kind (chain, confounding, ...)
    item: dict[str, Any] = Field(default_factory=dict)  # other tasks' descriptors of the item
    protocol: Protocol = "crawdad"  # the protocol that ran (protocol.kind)
    prompt_set: str | None = None  # None in schema 1 records: crawdad 0.1's set ("crawdad-v1")
    agents: dict[str, str]  # agent name -> model, in config order
    speaking_order: list[str] = Field(default_factory=list)  # drawn per question; [] in schema 1
    first_speaker: str | None = None  # agent name (None for solo runs)
    second_speaker: str | None = None  # agent name
    judge: str | None = None  # the judge's model (judge protocol)
    turns: list[Turn] = Field(default_factory=list)
    # The protocol's final answer: the last turn's (crawdad), the judge's verdict (judge), the
    # majority of the last round (simultaneous) or of all samples (solo). None: not extracted,
    # an unbroken tie, or an error.
    final_answer: str | None = None
    final_confidence: Share | None = None  # the confidence of the final answer
    tie: bool = False  # a majority vote was tied (broken by summed confidence where it could be)
    # Each agent's last extracted answer (solo: its majority over its samples).
    agent_answers: dict[str, str | None] = Field(default_factory=dict)
    # crawdad: the last two turns agreed; other protocols: every agent's last answer agreed
    consensus: bool = False
    # The grader model's verdict on the final response (`[grader]`); None: no grader ran.
    grading: Grading | None = None
    # The pipeline protocol's steps, one per agent (other protocols: empty).
    pipeline: list[PipelineRun] = Field(default_factory=list)
    end: DebateEnd = "cap"  # why it ended: consensus, cap, verdict, ...
    error: str | None = None  # what failed, when the debate could not be finished
    error_kind: str | None = None  # its class: ServerUnavailable, ModelNotFound, BackendError
    simulated: bool = False  # served by crawdad's fake servers, not real models
    seed: int = 0  # the run seed
    started_at: datetime | None = None  # UTC
    finished_at: datetime | None = None  # UTC
    seconds: Seconds = 0.0  # wall time of the debate

    @model_validator(mode="after")
    def _cladder_is_yes_or_no(self) -> DebateRecord:
        """A CLadder record keeps schema 2's strictness: a yes/no label, yes/no answers (or
        "uncertain", schema 6) and every descriptor. A data question (cladder-data) may have no
        label and no alignment (schema 7: a table of the user's own)."""
        if self.task != "cladder" and not self.task.startswith("cladder-"):
            return self  # cladder-data and its kin are CLadder questions too
        answers = [self.final_answer, *self.agent_answers.values(), *(t.answer for t in self.turns)]
        if self.gold not in YES_NO and not (self.gold is None and self.task != "cladder"):
            raise ValueError(f"a CLadder label is yes or no, not {self.gold!r}")
        wrong = [a for a in answers if a is not None and a not in (*YES_NO, UNCERTAIN)]
        if wrong:
            raise ValueError(
                f"a CLadder answer is yes or no (or {UNCERTAIN} where the prompt set allows "
                f"it), not {wrong[0]!r}"
            )
        needed = (
            ("rung", "query_type", "alignment")
            if self.task == "cladder"
            else ("rung", "query_type")
        )
        missing = [k for k in needed if getattr(self, k) is None]
        if missing:
            raise ValueError(f"a CLadder record needs {', '.join(missing)}")
        return self

    @property
    def ok(self) -> bool:
        return self.error is None


def gpu_seconds(record: DebateRecord) -> float:
    """The GPU seconds one debate counts: each turn's generation time as the server reported it
    (crawdad's wall time where it did not), and the extractor's requests (wall time). The one
    figure of a debate's GPU time: the reports' cost tables and a stopping rule's
    `max_gpu_seconds` both count it."""
    turns = sum(
        t.server_seconds if t.server_seconds is not None else t.seconds for t in record.turns
    )
    extractor = sum(t.extraction.seconds for t in record.turns if t.extraction is not None)
    return float(turns + extractor)


class DatasetInfo(Record):
    source: str  # path given by the user
    questions_file: str  # the questions file read
    models_file: str  # the causal models file read
    sha256: str  # of the questions file and the models file, together
    n_total: Count  # questions in the file
    n_selected: Count  # questions this run selected
    selection: dict[str, Any] = Field(default_factory=dict)  # the selection, as configured
    # The selected question ids live in this file of the run folder, one per line (the store
    # writes it); None in run folders made before it existed: the selection is then unknown.
    ids_file: str | None = None
    # In memory only (not written to the manifest): the ids the store writes to `ids_file`.
    selected_ids: list[str] | None = Field(default=None, exclude=True)


class ModelBuild(Record):
    """What a server tells of one model it serves (None where it does not)."""

    digest: str | None = None  # Ollama: the model's digest (another pull, another digest)
    root: str | None = None  # vLLM and SGLang: the served model's path or repository
    quantization: str | None = None  # Ollama: the quantization level (Q4_K_M, ...)
    parameter_size: str | None = None  # Ollama: the size it reports (32.8B, ...)


class ServedBy(ModelBuild):
    """What one server said of itself and of one model it serves, asked at the start of a
    session. Fields a server does not tell are None."""

    url: str  # the base URL asked
    model: str  # the model name asked for
    software: str | None = None  # ollama, vllm, llama.cpp, llama-cpp-python, sglang, ...
    version: str | None = None  # the server's version or build
    simulated: bool = False  # the server is crawdad's fake (it says so in a response header)
    asked_at: datetime | None = None  # UTC, when the server was asked

    def build(self) -> tuple[str | None, ...]:
        """What tells one build of a model from another: same name, other weights or server."""
        return (self.software, self.version, self.digest, self.root, self.quantization)

    def server_text(self) -> str:
        return " ".join(x for x in (self.software or "an unknown server", self.version) if x)

    def build_details(self) -> list[str]:
        """The model's build in words: digest, root (where it is not the name), quantization."""
        parts = [
            f"digest {self.digest[:12]}" if self.digest else None,
            f"root {self.root}" if self.root and self.root != self.model else None,
            self.quantization,
        ]
        return [p for p in parts if p]

    def describe(self) -> str:
        """One line for a report: `qwen3:32b on ollama 0.12.6 (digest 1a2b3c4d5e6f, Q4_K_M)`."""
        details = ", ".join([*self.build_details(), *(["simulated"] if self.simulated else [])])
        # a fake's URL is a random loopback port: left out, so that two identical simulated
        # runs give the same report
        where = "" if self.simulated else f" at {self.url}"
        return f"{self.model} on {self.server_text()}{where}" + (f" ({details})" if details else "")


def merge_served(
    have: dict[str, list[ServedBy]],
    more: dict[str, list[ServedBy]],
    key: Callable[[ServedBy], Hashable] = lambda e: (e.url, e.build()),
) -> dict[str, list[ServedBy]]:
    """`have` with the entries of `more` whose `key` it lacks, role by role: a cluster's shards'
    servers pooled (by URL and build), a resume's added to a manifest's (by build alone: the
    same build on another port is not news)."""
    out = {role: list(entries) for role, entries in have.items()}
    for role, entries in more.items():
        known = out.setdefault(role, [])
        seen = {key(e) for e in known}
        for e in entries:
            if key(e) not in seen:
                known.append(e)
                seen.add(key(e))
    return out


class StartedServer(Record):
    """One server crawdad started for the run (`crawdad/serving/supervisor.py`): what exactly
    served it, so that two runs that differ there are told apart (`analyze --compare`)."""

    key: str  # the plan's name of the server: its log is `servers/<key>.log`
    engine: str  # vllm, sglang, llamacpp, ollama
    engine_version: str | None = None  # the engine's own version (None: it did not say)
    command: list[str]  # the exact command line it was started with
    weights: str  # a Hugging Face id or folder, a GGUF file, an Ollama tag
    # What identifies the weights: "sha256:..." of a GGUF file, "revision:..." of a Hugging Face
    # snapshot, "index-sha256:..." of a folder's safetensors index, "digest:..." of an Ollama tag
    weights_hash: str | None = None
    served_name: str  # the model name the run asks for
    models: list[str] = Field(default_factory=list)  # the config's places it serves
    base_url: str  # what the run's base_urls got for it
    gpus: list[str] = Field(default_factory=list)  # "0: NVIDIA H100 80GB HBM3", ...; none: CPU
    memory_fraction: float | None = None  # of each GPU, as the plan gave it
    memory_gib: float = 0.0  # what the plan expected it to hold on each GPU
    tensor_parallel: int = 1  # GPUs one copy of the model is split over
    context_length: int | None = None  # the longest context the server was started with
    reasoning_parser: str | None = None  # the engine's parser of reasoning traces, if any
    started_at: datetime | None = None  # UTC
    pid: int | None = None  # the process crawdad started, whose server answered
    port: int | None = None  # the port it listened on (a taken planned port is moved)
    # How it was shown to be the server crawdad started: "api key", "socket" (ownership.py)
    proven_by: list[str] = Field(default_factory=list)

    def identity(self) -> tuple[Any, ...]:
        """What tells one serving of a model from another (not the port or the time)."""
        return (
            self.key,
            self.engine,
            self.engine_version,
            self.weights,
            self.weights_hash,
            tuple(self.gpus),
            self.memory_fraction,
            self.tensor_parallel,
            self.context_length,
            self.reasoning_parser,
        )


class ServerRestart(Record):
    """A line of `servers/restarts.jsonl`: one server crawdad started went down mid-run and was
    started again (or, past the bound of restarts, was not: `back` is False)."""

    schema_version: Version = SCHEMA_VERSION  # the version of this schema the line was written in
    key: str  # the server (StartedServer.key)
    at: datetime  # UTC, when it was seen down (and crawdad acted)
    # "exited with code -9", "frozen: no health answer and no tokens for 121 s", ...
    reason: str
    cause: str | None = None  # the likely cause read from its log (out of memory, ...)
    # From its last sign of life (a health answer, a token) to answering its health check again.
    downtime: Seconds = 0.0
    # Of which before crawdad acted: from its last sign of life to `at` (0: not known, older lines).
    silent_for: Seconds = 0.0
    back: bool = True  # False: it was not brought back (the bound, or it failed to start)


class StopChange(Record):
    """One stopping rule of a run or experiment and when it took over: the first one from the
    start, each later one when a resume with `--force` replaced the one before. A rule changed
    after interim results were seen no longer carries its stated guarantee."""

    rule: dict[str, Any] | None  # the rule (as in `stop`); None: no rule, every question runs
    from_question: Count  # questions finished (in the run or the baseline) when it took over
    at: datetime  # UTC, when it took over


class SelectionChange(Record):
    """One selection of a stopped experiment and when it took over: the first from the start,
    each later one when a resume with `--force` changed the questions after decisions could be
    seen. A selection changed after looking no longer carries the decisions' stated guarantee."""

    selection: dict[str, Any] | None  # as `ExperimentManifest.selection`; None: not recorded
    from_question: Count  # questions the baseline had finished when it took over
    at: datetime  # UTC, when it took over


class RunManifest(Record):
    """Written once when a run folder is created; checked on every resume."""

    schema_version: int = SCHEMA_VERSION  # the version of this schema the manifest was written in
    crawdad_version: str  # crawdad's version that started the run
    created_at: datetime  # UTC
    config: dict[str, Any]  # RunConfig dump, secrets removed
    prompts: dict[str, str]  # template name -> "name@sha"
    dataset: DatasetInfo  # what was read and selected
    servers: dict[str, str | None] = Field(default_factory=dict)  # base URL -> server version
    simulated: bool = False  # served by crawdad's fake servers
    # Role ("agent NAME", "judge", "extractor") -> what served it, one entry per base URL; a
    # resume on another build adds its entries (and a note). Empty before schema 5.
    served: dict[str, list[ServedBy]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)  # what --force replaced, with a timestamp
    # The run's stopping rule (`crawdad run --stop`, schema 8): alpha, half_width, min_questions,
    # max_questions, max_gpu_seconds, and (schema 10) target; without one (before) it was about
    # the run (`crawdad.run.experiment.recorded_rule`). None: the run answers every question.
    stop: dict[str, Any] | None = None
    # Every rule the run went through, oldest first (schema 9), where a resume with --force
    # changed `stop`; empty: the rule never changed (the guarantee holds as stated).
    stop_history: list[StopChange] = Field(default_factory=list)
    # The servers crawdad started for the run (schema 11), in start order; a resume on other
    # servers (another engine version, other weights) adds its entries and a note.
    started: list[StartedServer] = Field(default_factory=list)


class ExperimentManifest(Record):
    """`experiment.json` of an experiment folder: its variants, each an ordinary run folder
    `DIR/<variant>/`, and the baseline the analysis compares them with."""

    # the version of this schema (2: the stopping rule; 3: its history, `stop_history`; 4: the
    # rule's target, "run" when absent)
    schema_version: int = 4
    crawdad_version: str  # crawdad's version
    created_at: datetime  # UTC
    file: str  # the experiment file, as given
    file_sha256: str  # sha256 of the file
    baseline: str | None = None  # the variant the others are compared with
    variants: dict[str, dict[str, Any]]  # name -> its overrides of the base config, in file order
    base: dict[str, Any] = Field(default_factory=dict)  # the base config as written in the file
    # The stopping rule of the file's [stop] (schema 2): alpha, margin, min_questions,
    # max_questions, max_gpu_seconds, and (schema 4) target; without one (before) it was about
    # the run (`crawdad.run.experiment.recorded_rule`). None: every variant answers every question.
    stop: dict[str, Any] | None = None
    # Every rule the experiment went through, oldest first (schema 3), where a resume with
    # --force changed [stop]; empty: the rule never changed (the guarantee holds as stated).
    stop_history: list[StopChange] = Field(default_factory=list)
    # The questions the variants ran on, part of a stopped experiment's identity as its rule
    # is: the questions file and its sha256, the selection (rungs, filters, sample, limit,
    # order), the seed that draws the order and the questions selected. None: an experiment
    # made before it was recorded.
    selection: dict[str, Any] | None = None
    # Every selection a stopped experiment went through, oldest first, where a resume with
    # --force changed it; empty: it never changed.
    selection_history: list[SelectionChange] = Field(default_factory=list)

    @model_validator(mode="after")
    def _plain_variant_names(self) -> ExperimentManifest:
        """Each name is a folder inside the experiment folder: never `.`, `..` or a path."""
        for name in self.variants:
            if name in ("", ".", "..") or any(c in name for c in "/\\\0"):
                raise ValueError(
                    f"variant name {name!r} is not a plain folder name (empty, . or .., or a path)"
                )
        return self


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def invalid_reason(e: ValidationError) -> str:
    """What is wrong with a line that failed validation, for a warning: the first failing field
    and its value (`turns.0.confidence = 7.0: Input should be less than or equal to 1`), and how
    many more failed."""
    errors = e.errors(include_url=False)
    if not errors:
        return str(e)
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    msg = str(first.get("msg", "invalid"))
    if first.get("type") == "json_invalid":
        text = f"not a JSON record ({first.get('ctx', {}).get('error', msg)})"
    elif where:
        text = f"{where} = {_shown(first.get('input'))}: {msg}"
    else:  # a check of the whole record (a CLadder label, say): its message names the value
        text = msg
    more = len(errors) - 1
    return text + (f" (and {more} more field{'s' if more > 1 else ''})" if more else "")
