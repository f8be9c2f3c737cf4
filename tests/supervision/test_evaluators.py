"""Evaluators: an HTTP judge over a real local server, and answers that must mean RENEW."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.supervision.evaluators import CallableEvaluator, HttpJudge, consult, parse_decision
from app.supervision.verdicts import Evidence, Verdict

EVIDENCE = Evidence(
    kind="tool_call",
    subject="crm.search",
    lease_s=1.0,
    elapsed_s=3.0,
    renewals=2,
    progress_count=0,
    since_progress_s=None,
    progressed_last_period=False,
    suspicion=1.3,
)


class JudgeServer(ThreadingHTTPServer):
    """A local HTTP judge: records what it is sent, answers what the test says."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Judge)
        self.received: list[dict[str, object]] = []
        self.answer = b"{}"

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/verdict"


class Judge(BaseHTTPRequestHandler):
    """Answers with whatever body the test put on the server."""

    server: JudgeServer

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.server.received.append(json.loads(self.rfile.read(length)))
        body = self.server.answer
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    server = JudgeServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def test_http_judge_gets_the_evidence_and_its_verdict_is_applied(
    judge_server: JudgeServer,
) -> None:
    judge_server.answer = json.dumps(
        {"verdict": "nudge", "reason": "try the cache", "note": "use cached CRM results"}
    ).encode()
    decision = await consult(HttpJudge(judge_server.url), EVIDENCE, timeout_s=5)
    assert decision.verdict == Verdict.NUDGE
    assert decision.note == "use cached CRM results"
    assert judge_server.received[0]["subject"] == "crm.search"


async def test_an_unparseable_judge_answer_means_renew(judge_server: JudgeServer) -> None:
    judge_server.answer = b"<html>oops</html>"
    decision = await consult(HttpJudge(judge_server.url), EVIDENCE, timeout_s=5)
    assert decision.verdict == Verdict.RENEW
    assert "evaluator failed" in decision.reason


async def test_an_unreachable_judge_means_renew() -> None:
    decision = await consult(HttpJudge("http://127.0.0.1:9/verdict"), EVIDENCE, timeout_s=5)
    assert decision.verdict == Verdict.RENEW


async def test_a_callable_evaluator_is_named_by_module_and_function() -> None:
    decision = await consult(
        CallableEvaluator("tests.support.judges:escalate"), EVIDENCE, timeout_s=5
    )
    assert decision.verdict == Verdict.ESCALATE
    assert decision.reason == "tool_call needs a person"


def test_verdicts_parse_from_strings_and_dicts_in_any_case() -> None:
    assert parse_decision("intervene", "x").verdict == Verdict.INTERVENE
    assert parse_decision({"verdict": " Renew "}, "x").verdict == Verdict.RENEW
    with pytest.raises(ValueError):
        parse_decision({"verdict": "maybe"}, "x")
