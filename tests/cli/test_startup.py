"""Start-up of the command line and the service (issue 20): what each command loads, and in what
order the service answers.

Timing figures live in ``bench/overhead.py``; these tests assert on what makes them possible:
``--help`` builds only the subcommand asked for and imports no heavy library; a grading run on
the direct transport never imports litellm or instructor; ``bonusjudge serve`` answers
``/healthz`` before ``/readyz`` turns 200, and until then ``/readyz`` says what is loading.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from cli.main import SUBCOMMANDS, build_parser, chosen_subcommand
from core.processes import free_port
from standins.openai_server import OpenAIStandIn
from tests.helpers.processes import cli_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"

HEAVY = ("litellm", "instructor", "openai", "torch", "transformers", "fastapi", "starlette",
         "uvicorn", "sklearn", "scipy", "matplotlib", "calibration", "aiohttp", "api.app")
"""Libraries (and the service package) no ``--help`` may import."""

COMMAND_MODULES = {c.name: c.module for c in SUBCOMMANDS if c.module is not None}


def loaded_after(argv: list[str], watch: tuple[str, ...]) -> tuple[int, list[str], str]:
    """Run ``bonusjudge ARGV`` in a fresh interpreter; its status and which of ``watch`` loaded."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from cli.main import main
        try:
            status = main({argv!r})
        except SystemExit as exit:
            status = exit.code
        print(json.dumps([status, sorted(m for m in {watch!r} if m in sys.modules)]),
              file=sys.stderr)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=cli_env(), timeout=300, check=False, cwd=ROOT)
    status, loaded = json.loads(done.stderr.strip().splitlines()[-1])
    return int(status or 0), loaded, done.stdout


@pytest.mark.process
def test_top_level_help_imports_no_subcommand_and_no_pydantic() -> None:
    status, loaded, out = loaded_after(
        ["--help"], (*HEAVY, "pydantic", "judge", *COMMAND_MODULES.values())
    )
    assert status == 0 and loaded == []
    for command in SUBCOMMANDS:
        assert command.name in out and command.help.split()[0] in out


@pytest.mark.process
@pytest.mark.parametrize("command", [c.name for c in SUBCOMMANDS])
def test_a_subcommand_help_imports_only_that_subcommand(command: str) -> None:
    others = tuple(m for name, m in COMMAND_MODULES.items() if name != command)
    status, loaded, out = loaded_after([command, "--help"], (*HEAVY, *others))
    assert status == 0 and f"usage: bonusjudge {command}" in out
    assert loaded == [], f"{command} --help loaded {loaded}"


def test_the_lazy_parser_is_the_full_parser() -> None:
    full = build_parser()
    assert build_parser(lazy=True).format_help() == full.format_help()
    sub = next(a for a in full._actions if a.dest == "command")
    # The one-line helps main lists without importing a module are the modules' own.
    assert [(a.dest, a.help) for a in sub._choices_actions] == [  # type: ignore[attr-defined]
        (c.name, c.help) for c in SUBCOMMANDS
    ]
    for command in SUBCOMMANDS:
        lazy = build_parser(command.name, lazy=True)
        lazy_sub = next(a for a in lazy._actions if a.dest == "command")
        assert (lazy_sub.choices[command.name].format_help()  # type: ignore[index]
                == sub.choices[command.name].format_help())  # type: ignore[index]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["grade", "in.jsonl", "--out", "o"], "grade"),
        (["--verbose", "serve", "--port", "1"], "serve"),
        (["hash-key", "serve"], "hash-key"),  # the key, not a second command
        (["--help"], None),
        ([], None),
        (["grdae", "x"], None),  # a typo: the parser names the valid choices
        (["--", "grade"], None),
    ],
)
def test_the_subcommand_is_the_first_word(argv: list[str], expected: str | None) -> None:
    assert chosen_subcommand(argv) == expected


@pytest.mark.process
def test_a_mistyped_subcommand_is_a_one_line_error() -> None:
    status, _, _ = loaded_after(["grdae"], ())
    assert status == 2


@pytest.mark.process
def test_grading_on_the_direct_transport_never_imports_litellm(tmp_path: Path) -> None:
    with OpenAIStandIn() as judge:
        status, loaded, _ = loaded_after(
            ["grade", str(EXAMPLES), "--out", str(tmp_path / "out.jsonl"), "--model",
             "openai/standin", "--api-base", judge.base_url, "--metrics", "coverage,defects",
             "--cache-dir", str(tmp_path / "cache"), "--quiet"],
            ("litellm", "instructor", "openai", "torch", "transformers", "fastapi"),
        )
        calls = judge.stats().requests
    assert status == 0
    assert loaded == []  # about 2.8 s of imports the first result never waits for
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    # Every item graded by the judge: the preflight's one-token call, then two calls per item.
    assert len(lines) == 10 and calls == 1 + 2 * 10


@pytest.mark.process
def test_serve_answers_healthz_first_and_readyz_says_what_is_loading(tmp_path: Path) -> None:
    with OpenAIStandIn() as judge:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - the child writes to it
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--port", str(port), "--model",
             "openai/standin", "--api-base", judge.base_url, "--metrics", "coverage,defects",
             "--cache-dir", str(tmp_path / "cache")],
            stdout=log, stderr=subprocess.STDOUT,
            env=cli_env({"BONUSJUDGE_DATA_DIR": str(tmp_path / "data")}),
        )
        first_health: int | None = None
        not_ready: list[dict[str, object]] = []
        ready: dict[str, object] | None = None
        try:
            deadline = time.monotonic() + 120
            step = 0
            while ready is None:
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
                assert time.monotonic() < deadline
                step += 1
                try:
                    if first_health is None and httpx.get(f"{url}/healthz").status_code == 200:
                        first_health = step
                    answer = httpx.get(f"{url}/readyz")
                except httpx.HTTPError:
                    time.sleep(0.01)
                    continue
                if answer.status_code == 200:
                    ready = answer.json()
                else:
                    assert answer.status_code == 503, answer.text
                    not_ready.append(answer.json())
                time.sleep(0.01)
            ready_step = step
        finally:
            proc.terminate()
            status = proc.wait(60)
    assert status == 0
    assert first_health is not None and first_health <= ready_step
    assert ready["ready"] is True and set(ready["checks"]) >= {"encoder", "cache", "judge"}  # type: ignore[call-overload, index]
    for body in not_ready:
        assert body["ready"] is False
        failing = [c for c in body["checks"].values() if not c["ok"]]  # type: ignore[attr-defined]
        # What is still loading, named: the service itself, then (if needed) an encoder.
        assert failing and all(c["detail"] for c in failing), body
        service = body["checks"].get("service")  # type: ignore[attr-defined]
        if service is not None:
            assert service["detail"].startswith(("loading: ", "starting: ")), body


@pytest.mark.process
def test_a_service_that_cannot_start_exits_2_with_one_line(tmp_path: Path) -> None:
    # The app is built after the server listens; a failure there still ends the command the
    # way a bad setting does: status 2 and one line naming the cause, never a server that
    # answers /healthz forever without an app behind it.
    (tmp_path / "a-file").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "cli", "serve", "--port", str(free_port()), "--model",
         "openai/standin", "--api-base", "http://127.0.0.1:9/v1", "--metrics",
         "coverage,defects", "--cache-dir", str(tmp_path / "cache"),
         "--no-preflight"],  # the judge at port 9 would stop it before the app is built
        capture_output=True, text=True, timeout=120, check=False,
        env=cli_env({"BONUSJUDGE_DATA_DIR": str(tmp_path / "a-file" / "data")}),
    )
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("bonusjudge: error: ") and "a-file" in last, last


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_a_bad_grace_is_refused_before_anything_loads(value: str) -> None:
    parser = build_parser("serve", lazy=True)
    with pytest.raises(SystemExit) as refused:
        parser.parse_args(["serve", "--grace", value])
    assert refused.value.code == 2
    assert build_parser("serve", lazy=True).parse_args(["serve", "--grace", "2.5"]).grace == 2.5
