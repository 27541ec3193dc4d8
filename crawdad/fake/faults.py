"""Failures injected at random, per request, from a seed.

A draw depends on the seed, the model, the request's messages and how many times that same
request was made before, so a run with the same requests sees the same faults whatever the order
they arrive in, and a retried request gets a fresh draw (it can succeed).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from crawdad.fake.behaviour import FaultKind, seeded_rng

ALL_FAULTS: tuple[FaultKind, ...] = (
    "http_500",  # server error with a real-looking body
    "http_503",  # server busy
    "reset",  # connection reset before any response
    "hang",  # never answers; released when the server stops or the client gives up
    "cut",  # response body cut short, without the final chunk
    "stream_error",  # an error object in the middle of the stream (Ollama and vLLM do this)
    "not_found",  # 404 model not found, with the server's real error body
    # A 200 whose body is not what the API sends (a broken proxy, a server bug). Not streamed:
    # the whole body; streamed: one such chunk in the middle of an otherwise good stream
    # ("html": a proxy's error page in place of the whole stream).
    "garbled",  # bytes that are not JSON
    "empty_json",  # {}
    "html",  # an HTML page, Content-Type text/html
    "wrong_shape",  # valid JSON of the wrong shape
)

TRANSIENT_FAULTS: tuple[FaultKind, ...] = ("http_500", "http_503", "reset", "cut", "stream_error")
GARBAGE_FAULTS: tuple[FaultKind, ...] = ("garbled", "empty_json", "html", "wrong_shape")


class FaultPlan(BaseModel):
    """Inject a fault into a fraction `rate` of the generation requests."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(default=0.0, ge=0, le=1)
    # Transient kinds by default: a retry can succeed. Add "hang", "not_found" and the
    # GARBAGE_FAULTS explicitly.
    kinds: list[FaultKind] = Field(default_factory=lambda: list(TRANSIENT_FAULTS))
    seed: int = 0
    models: list[str] | None = None  # only requests to these models; None: every model

    def draw(self, model: str, digest: str, attempt: int) -> FaultKind | None:
        """The fault for the `attempt`-th (0-based) time this request is made, if any."""
        if self.rate <= 0 or not self.kinds:
            return None
        if self.models is not None and model not in self.models:
            return None
        rng = seeded_rng("fault", self.seed, model, digest, attempt)
        if rng.random() >= self.rate:
            return None
        return rng.choice(self.kinds)
