"""What a process imports and does before it serves: ``leasehold worker`` start-up (issue 19).

Structural checks, not timings (those are in BENCHMARKS.md, ``bench.worker_startup``):
each runs a fresh interpreter, so nothing this test session imported counts.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.support.processes import PROBE_TIMEOUT_S, REPO_ROOT, python_prints


def test_a_worker_imports_no_http_server_or_client() -> None:
    # what `leasehold worker` imports before it claims: the CLI, the worker, a handler
    # module; the API, its server and the HTTP client are not needed to claim or run
    heavy = [
        "fastapi",
        "starlette",
        "uvicorn",
        "sse_starlette",
        "httpx",
        "rich",
        "app.api",
        "app.client",
        "app.telemetry.metrics_server",
        "app.models.api",  # the API's request/response models: created only where used
    ]
    code = (
        "import sys\n"
        "import app.cli.main, app.executor.worker, app.demo\n"
        f"print([name for name in {heavy!r} if name in sys.modules])\n"
    )
    assert python_prints(code) == "[]"


def test_models_are_built_when_first_used_not_at_import() -> None:
    code = (
        "import app.models as m\n"
        "before = m.Run.__pydantic_complete__\n"
        "run = m.Run.model_validate({'id': 'q.X', 'queue': 'q', 'handler': 'h',\n"
        "    'status': 'queued', 'created_at': '2026-12-01T00:00:00Z'})\n"
        "print(before, m.Run.__pydantic_complete__, run.status.value, run.fence)\n"
    )
    assert python_prints(code) == "False True queued 0"


def test_the_api_and_read_models_are_imported_only_from_their_own_modules() -> None:
    # app.models (what every process imports) neither imports nor names them: the API,
    # the client and users' code import them from app.models.api and app.models.read
    code = (
        "import sys\n"
        "import app.models\n"
        "loaded = [n for n in ('app.models.api', 'app.models.read') if n in sys.modules]\n"
        "from app.models.api import CreateRunRequest\n"
        "from app.models.read import RunPage\n"
        "request = CreateRunRequest.model_validate({'handler': 'h'})\n"
        "print(loaded, request.handler, RunPage.__module__,\n"
        "    hasattr(app.models, 'CreateRunRequest'), hasattr(app.models, 'RunPage'))\n"
    )
    assert python_prints(code) == "[] h app.models.read False False"


def test_the_cli_help_imports_no_pydantic() -> None:
    # typer builds every command for --help, and `--status` options list RunStatus: with
    # the enum in app.models that imported pydantic and every model class (app.statuses)
    code = (
        "import sys\n"
        "sys.argv = ['leasehold', '--help']\n"
        "from app.cli.launch import main\n"
        "status = None  # typer's help ends with SystemExit(0)\n"
        "try:\n    main()\n"
        "except SystemExit as exc:\n    status = exc.code\n"
        "print(status, [n for n in ('pydantic', 'app.models') if n in sys.modules])\n"
    )
    assert python_prints(code) == "0 []"


def test_the_statuses_are_still_found_in_app_models() -> None:
    code = (
        "import app.models as m, app.statuses as s\n"
        "print(m.RunStatus is s.RunStatus, m.TERMINAL_STATUSES is s.TERMINAL_STATUSES,\n"
        "    m.PARKED_STATUSES is s.PARKED_STATUSES, m.RunStatus('failed').is_terminal)\n"
    )
    assert python_prints(code) == "True True True True"


def test_the_console_script_starts_behind_a_quiet_collector() -> None:
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["leasehold"] == "app.cli.launch:main"
    # raised while modules load; settle() freezes them and puts the defaults back
    code = (
        "import gc\n"
        "from app import startup as launch\n"
        "default = gc.get_threshold()\n"
        "launch.quiet_collector()\n"
        "quiet = gc.get_threshold()[0]\n"
        "launch.settle()\n"
        "print(quiet == launch.START_UP_THRESHOLD, gc.get_threshold() == default,\n"
        "      gc.get_freeze_count() > 0)\n"
    )
    assert python_prints(code) == "True True True"


def test_settle_without_a_quiet_start_leaves_the_thresholds_alone() -> None:
    # python -m app.cli, tests, an embedding application: only the freeze happens
    code = (
        "import gc\n"
        "gc.set_threshold(1234, 5, 6)\n"
        "from app import startup as launch\n"
        "launch.settle()\n"
        "print(gc.get_threshold())\n"
    )
    assert python_prints(code) == "(1234, 5, 6)"


def test_the_console_script_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from app.cli.launch import main; main()", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert "worker" in done.stdout and "Leasehold" in done.stdout


def test_a_worker_started_by_the_console_script_imports_no_api_and_no_http_client() -> None:
    # `leasehold worker --queues q --concurrency 3` as the script runs it, up to the moment
    # the worker would serve (asyncio.run): typer parsed its flags, its settings are read,
    # its handlers and the worker imported; the API, the HTTP client and the toolkits
    # typer's help could draw with (click's own package, rich) are not
    heavy = ["click", "rich", "fastapi", "starlette", "httpx", "app.client"]
    code = (
        "import asyncio, os, sys\n"
        "os.environ['LEASEHOLD_HANDLERS'] = 'app.demo'\n"
        "os.environ['LEASEHOLD_REDIS_URL'] = 'redis://127.0.0.1:1/0'  # not reached\n"
        "os.environ['LEASEHOLD_WORKER_EVENT_LOOP'] = 'asyncio'  # so asyncio.run serves\n"
        "def serve(worker_run):\n"
        "    worker_run.close()\n"
        f"    print([name for name in {heavy!r} if name in sys.modules],\n"
        "          'app.executor.worker' in sys.modules)\n"
        "asyncio.run = serve\n"
        "sys.argv = ['leasehold', 'worker', '--queues', 'q', '--concurrency', '3']\n"
        "from app.cli.launch import main\n"
        "main()\n"
    )
    assert python_prints(code) == "[] True"


def test_a_worker_with_tracing_off_imports_no_opentelemetry() -> None:
    # redis-py's observability imports OpenTelemetry's metrics API, and the SDK's metrics
    # where installed (this venv has the SDK: the tracing tests need it), for metrics
    # Leasehold never turns on (app.imports); with tracing off nothing else needs them.
    # A handler that imports them afterwards gets them as always.
    code = (
        "import asyncio, os, sys\n"
        "os.environ['LEASEHOLD_HANDLERS'] = 'app.demo'\n"
        "os.environ['LEASEHOLD_REDIS_URL'] = 'redis://127.0.0.1:1/0'  # not reached\n"
        "os.environ['LEASEHOLD_WORKER_EVENT_LOOP'] = 'asyncio'\n"
        "def serve(worker_run):\n"
        "    worker_run.close()\n"
        "    loaded = sorted(n for n in sys.modules if n.startswith('opentelemetry'))\n"
        "    from opentelemetry.metrics import get_meter\n"
        "    from opentelemetry.sdk.metrics import MeterProvider\n"
        "    meter = MeterProvider().get_meter('handler')\n"
        "    print(loaded, 'redis' in sys.modules, type(meter).__name__, callable(get_meter))\n"
        "asyncio.run = serve\n"
        "sys.argv = ['leasehold', 'worker', '--concurrency', '3']\n"
        "from app.cli.launch import main\n"
        "main()\n"
    )
    assert python_prints(code) == "[] True Meter True"


def test_runs_get_imports_no_server_and_no_command_line_toolkit() -> None:
    # `leasehold runs get ID` against an address nobody listens on: the request is made
    # (httpx) and refused; the API's server side is not imported, nor the command-line
    # toolkits httpx's own CLI would load (click, rich, pygments: app.httpx_import)
    heavy = ["fastapi", "starlette", "uvicorn", "app.api", "rich", "click", "pygments"]
    code = (
        "import sys\n"
        "from app.stack.embedded import free_port\n"
        "sys.argv = ['leasehold', 'runs', 'get', 'default.X',\n"
        "            '--api-url', f'http://127.0.0.1:{free_port()}']\n"
        "from app.cli.launch import main\n"
        "try:\n    main()\n"
        "except SystemExit as exc:\n    status = exc.code\n"
        f"print(status, 'httpx' in sys.modules, [n for n in {heavy!r} if n in sys.modules])\n"
    )
    assert python_prints(code) == "1 True []"


def test_httpx_imported_without_its_cli_still_has_it_on_request() -> None:
    code = (
        "import sys\n"
        "from app.httpx_import import httpx\n"
        "before = 'httpx._main' in sys.modules\n"
        "import httpx._main\n"
        "print(before, httpx.Client.__name__, 'httpx._main' in sys.modules)\n"
    )
    assert python_prints(code) == "False Client True"
