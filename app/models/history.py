"""A run's history: what a replay of the run needs, as one JSON document.

``GET /runs/{id}/history`` (and ``leasehold runs export``) write it; :mod:`app.testing`
reads it back to replay the run against new code (``replay(history, handler)``). It
holds the run's record fields a claim hands its handler (handler, input, attempt,
build, status, the last checkpoint's state and step counts), its step log (the steps
the run took, in order: what the drift check compares), and the records its steps
left, *as stored*: effect records (their ``result`` is the JSON text the effect
returned), wait records (``status`` ``done`` with its ``payload`` text, or
``timed_out``), and the family hash (``spawn:<n>`` -> child id, ``out:<child id>`` ->
the child's outcome JSON). Its events come last, at most a bounded number
(``events_truncated`` says when more were left out): a replay does not read them,
a person does.

``version`` is the format's: a reader refuses one it does not know rather than guess.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from app.models import BaseModel, RunEvent

HISTORY_VERSION = 1
# the most events a history holds: a run with a huge event stream is cut here
HISTORY_MAX_EVENTS = 1000


class HistoryRun(BaseModel):
    """The run's record fields a replay starts from, as its next claim would read them."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    queue: str = Field(min_length=1, max_length=200)
    handler: str = Field(min_length=1, max_length=200)
    status: str = Field(max_length=64)
    attempt: int = Field(ge=0)
    build_id: str | None = None
    input: Any = None
    # the last checkpoint's state (None before any): what ``ctx.state`` starts as
    state: Any = None
    resume_input: Any = None
    # the last checkpoint's step counts per counter, and ``~position``: where the next
    # attempt's numbering (and the drift check) starts
    effect_seq: dict[str, int] = Field(default_factory=dict)
    # a re-run's first run (effect keys start with its id); '' for this run
    retry_root: str = ""


class RunHistory(BaseModel):
    """A run's history (see the module docstring); ``version`` :data:`HISTORY_VERSION`."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1  # HISTORY_VERSION
    run: HistoryRun
    # the step log by position: '<kind>|<field>' ('e' effect, 'w' wait, 's' spawn, 'j'
    # join); None where a position was never noted
    steps: list[str | None] = Field(default_factory=list)
    effects: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # each ctx.patched change the run decided: patch id -> whether it took the patch
    patches: dict[str, bool] = Field(default_factory=dict)
    waits: dict[str, Any] = Field(default_factory=dict)
    family: dict[str, str] = Field(default_factory=dict)
    events: list[RunEvent] = Field(default_factory=list)
    events_truncated: bool = False
