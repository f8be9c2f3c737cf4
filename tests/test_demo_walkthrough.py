"""`leasehold demo ...`: each scripted story ends the way the README says."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from app.demo.judge import escalate_approvals
from tests.support.processes import REPO_ROOT


def demo(*args: str, story: str = "kill-worker") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", story, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )


def test_killing_the_owner_ends_the_stream_orphaned() -> None:
    result = demo("--lease-ttl-s", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    kill = next(i for i, line in enumerate(lines) if line.startswith("-> kill -9"))
    assert "claimed by" in lines[kill - 1]
    assert "== orphaned: executor lease expired (owner " in lines[-2]
    assert lines[-1].endswith("ended orphaned: executor lease expired (attempt 1, fence 2)")
    # the status and the lease are each said once, not twice
    assert "orphaned: orphaned" not in result.stdout
    assert [line for line in lines if line.count("lease expired") > 1] == []


def test_with_retry_another_worker_takes_the_run_over_and_finishes_it() -> None:
    result = demo("--retry", "--lease-ttl-s", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    after_kill = result.stdout.split("-> kill -9", 1)[1]
    assert "stopped renewing at" in after_kill
    assert "requeued for attempt 2 (lease_expired)" in after_kill
    assert "claimed by" in after_kill
    assert "== succeeded" in after_kill
    assert result.stdout.splitlines()[-1].endswith("ended succeeded (attempt 2, fence 3)")


def test_escalate_parks_a_silent_approval_for_a_person_and_the_resume_finishes_it() -> None:
    result = demo(story="escalate")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    resume = next(i for i, line in enumerate(lines) if line.startswith("-> leasehold runs resume"))
    # the free renewals first, then the evaluator's ESCALATE, then the run parks
    assert [line for line in lines[:resume] if "watchdog:" in line] == [
        line for line in lines if "watchdog:" in line
    ]
    verdicts = [
        line.split("watchdog: ", 1)[1].split(" ", 1)[0] for line in lines if "watchdog:" in line
    ]
    assert verdicts == ["RENEW", "RENEW", "ESCALATE"]
    assert "watchdog: ESCALATE (an approval needs a person)" in lines[resume - 2]
    assert "-- waiting for a person: an approval needs a person" in lines[resume - 1]
    after = lines[resume + 1 :]
    assert "-- resumed by a person, input" in after[0]
    assert "claimed by" in after[1]
    assert "== succeeded" in after[2]
    output = json.loads(after[3].removeprefix("output "))
    assert output["approved"] is True
    assert output["decision"] == {"approved_by": "you", "comment": "looks right"}
    assert after[4].endswith("ended succeeded (attempt 1, fence 4)")


def test_effect_unknown_parks_a_charge_cut_off_by_kill_9_and_resolving_it_never_charges_twice() -> (
    None
):
    result = demo("--lease-ttl-s", "1", story="effect-unknown")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    kill = next(i for i, line in enumerate(lines) if line.startswith("-> kill -9"))
    assert re.search(r"-- effect \S+:charge:1 started", lines[kill - 1])
    after = lines[kill + 1 :]
    assert "-- needs a person: effect_outcome_unknown: effect charge" in after[0]
    assert after[2].startswith("-> leasehold runs resolve ")
    assert "--action retry --effect-outcome applied" in after[2]
    assert "-- resolved by a person: retry, effects applied" in after[3]
    killed_owner = lines[kill].rsplit("(the owner, ", 1)[1].rstrip(")")
    assert "claimed by" in after[4] and killed_owner not in after[4]
    # the new owner gets the recorded result: the provider is not called again
    assert re.search(r"-- effect \S+:charge:1 replayed", after[5])
    assert "== succeeded" in after[6]
    assert sum(":charge:1 started" in line for line in lines) == 1
    receipt = json.loads(after[7].removeprefix("output ").split(" (the recorded", 1)[0])
    assert receipt == {"receipt": {"charge_id": "ch-from-the-dashboard", "amount": 42}}
    assert after[8].endswith("ended succeeded (attempt 1, fence 4)")


@pytest.mark.parametrize(
    ("story", "seconds"),
    [
        ("kill-worker", "nan"),
        ("escalate", "nan"),
        ("effect-unknown", "nan"),
        ("escalate", "inf"),
        ("effect-unknown", "0"),
        ("kill-worker", "-1"),
        ("escalate", "301"),
        ("effect-unknown", "1e308"),
    ],
)
def test_a_demo_refuses_a_lease_it_could_not_run_with_before_starting_anything(
    story: str, seconds: str
) -> None:
    flag = "--op-lease-s" if story == "escalate" else "--lease-ttl-s"
    result = demo(flag, seconds, story=story)
    assert result.returncode == 2, result.stdout + result.stderr
    message = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stderr).split())
    assert f"Invalid value for '{flag}': must be a number of seconds above 0, at most 300" in (
        message
    )
    assert "stack up" not in result.stdout


def test_the_demo_judge_escalates_the_approval_wait_and_renews_anything_else() -> None:
    """So naming it on a stack that runs other work never parks that work."""
    assert escalate_approvals({"kind": "tool_call", "subject": "approval"}) == {
        "verdict": "ESCALATE",
        "reason": "an approval needs a person",
    }
    assert escalate_approvals({"kind": "tool_call", "subject": "crm.search"})["verdict"] == "RENEW"


def test_rerun_fails_an_order_after_its_charge_and_the_re_run_charges_nothing_again() -> None:
    result = demo(story="rerun")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    failed = next(i for i, line in enumerate(lines) if "== failed: shipping_unavailable" in line)
    assert re.search(r"-- effect (\S+):charge:1 recorded", lines[failed - 1])
    first = lines[1].split()[1]
    assert lines[failed + 2] == f"-> leasehold runs retry {first}"
    after = lines[failed + 3 :]
    assert f"re-run of {first}" in after[1]
    # the re-run gets the recorded charge under the first run's key: no second charge
    assert f"-- effect {first}:charge:1 replayed" in after[3]
    assert "== succeeded" in after[4]
    assert sum(":charge:1 started" in line for line in lines) == 1
    assert after[-2].startswith(f"{first} stays failed, re-run as ")


def test_tenants_see_only_their_own_runs_and_one_tenant_s_quota_leaves_the_other_running() -> None:
    result = demo(story="tenants")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    acme_pid, bravo_pid = re.findall(r"worker (\d+) serves (?:acme|bravo)", lines[0])
    # acme's two runs on acme's worker, then bravo's on bravo's: each namespace its own
    owners = re.findall(r"-- claimed by \S+-(\d+)-[0-9a-f]+ ", result.stdout)
    assert owners == [acme_pid, acme_pid, bravo_pid]
    first = next(line for line in lines if line.startswith("acme posted ")).split()[2]
    assert f"bravo GET /runs/{first} -> 404 Run not found" in lines
    assert "bravo GET /runs -> no runs (acme lists 2)" in lines
    refused = next(i for i, line in enumerate(lines) if "-> 429" in line)
    # the quota refuses the fourth live run: three long sleeps, then the 429 naming it
    assert lines[refused - 4] == "acme holds 0 live runs (quota live_runs 3)"
    assert all(line.endswith("(demo.sleep 600s)") for line in lines[refused - 3 : refused])
    assert re.fullmatch(
        r"acme POST /runs -> 429 Quota exceeded: quota live_runs, limit 3, namespace acme, "
        r"Retry-After \d+s",
        lines[refused],
    )
    bravo_run = next(line for line in lines if line.startswith("bravo posted ")).split()[2]
    assert lines[-1] == f"{bravo_run} ended succeeded (attempt 1, fence 1)"


def test_deploy_keeps_pinned_runs_on_v1_parks_a_forced_drift_and_drains_v1() -> None:
    result = demo(story="deploy")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "order A shipped: resumed on its build v1" in out
    assert re.search(
        r"order B woke on v2 and parked version_drift: step 0 was 'e\|charge:1', "
        r"v2 asks 'e\|receipt:1'",
        out,
    )
    assert "GET /builds/v1: drained=True" in out
    assert "order C (begun on v1) finished on v2, patched=False: ['charged C" in out
    assert "order D (begun on v2) finished on v2, patched=True: ['receipt for D" in out
    # the story ends on the drifted order, left for a person
    assert "ended reconciliation_required: version_drift" in out.splitlines()[-1]
