"""Ordinary mistakes get one line `bonusjudge: error: ...`, exit 2, no traceback and no output
file; a judge that cannot work is found out by the preflight before anything is written.

Every case runs the CLI as users do: a fresh interpreter (subprocess).
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.processes import free_port
from standins.openai_server import FaultPlan, OpenAIStandIn
from tests.helpers.processes import cli_env, run_cli

# Every test here starts a process (the CLI, an interpreter, a server): not in the fast loop.
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "judge" / "data" / "examples_chartom.jsonl"
MCQ = ROOT / "judge" / "data" / "mcq_example_tombench.jsonl"


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2 and exactly one stderr line, starting `bonusjudge...: error:`, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("bonusjudge") and ": error: " in lines[0], lines[0]
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_grade_missing_input(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = run_cli(["grade", str(tmp_path / "missing.jsonl"), "--out", str(out)])
    assert_one_line_error(done, "input", "no such file", "missing.jsonl")
    assert not out.exists()


def test_grade_directory_as_input(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = run_cli(["grade", str(tmp_path), "--out", str(out)])
    assert_one_line_error(done, "input", "not a file")
    assert not out.exists()


def test_grade_server_where_nothing_listens(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = run_cli(["grade", str(EXAMPLES), "--out", str(out), "--server",
                    f"http://127.0.0.1:{free_port()}", "--quiet"])
    assert_one_line_error(done, "server", "cannot reach")
    assert not out.exists()  # an unreachable service leaves no empty output behind


def test_grade_out_is_a_folder_or_a_bad_path(tmp_path: Path) -> None:
    assert_one_line_error(run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path)]),
                          "out", "is a folder")
    blocked = tmp_path / "file"
    blocked.write_text("")
    done = run_cli(["grade", str(EXAMPLES), "--out", str(blocked / "sub" / "out.jsonl")])
    assert_one_line_error(done, "not a folder")


def test_grade_out_on_a_full_disk_keeps_what_was_written(tmp_path: Path) -> None:
    """A write that fails (a full disk; here a file-size limit) is one line naming the file,
    and the lines written before it stay for the next run to resume from."""
    out = tmp_path / "out.jsonl"

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))

    done = subprocess.run(
        [sys.executable, "-m", "cli", "grade", str(EXAMPLES), "--out", str(out),
         "--metrics", "coverage,rouge_l", "--no-cache", "--quiet"],
        capture_output=True, text=True, env=cli_env(), preexec_fn=small_files, timeout=600,
        check=False,
    )
    assert_one_line_error(done, "out.jsonl", "File too large")
    assert 0 < out.stat().st_size <= 6000


def test_serve_port_out_of_range() -> None:
    assert_one_line_error(run_cli(["serve", "--port", "99999"]), "--port", "1-65535")


def test_serve_port_in_use() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_cli(["serve", "--port", str(port)], timeout=120)
    assert_one_line_error(done, "port", f"127.0.0.1:{port}")


def test_mcq_missing_input_and_bad_out(tmp_path: Path) -> None:
    assert_one_line_error(run_cli(["mcq", str(tmp_path / "nope.jsonl")]), "nope.jsonl")
    assert_one_line_error(run_cli(["mcq", str(MCQ), "--out", str(tmp_path)]), str(tmp_path))


def test_calibrate_unknown_set_and_folder(tmp_path: Path) -> None:
    assert_one_line_error(
        run_cli(["calibrate", "no-such-set", "--out", str(tmp_path / "r")]), "no-such-set"
    )
    assert_one_line_error(run_cli(["calibrate", str(tmp_path), "--out", str(tmp_path / "r")]))
    assert not (tmp_path / "r").exists()


def test_calibrate_unknown_metric_is_the_config_error_line(tmp_path: Path) -> None:
    line = assert_one_line_error(
        run_cli(["calibrate", "calibration/data/example.jsonl", "--metrics", "coverage,bogus",
                 "--out", str(tmp_path / "r")]),
    )
    assert line == "bonusjudge: error: unknown metric(s) ['bogus'] [metrics]"
    assert not (tmp_path / "r").exists()


def test_unknown_option_is_one_line() -> None:
    assert_one_line_error(run_cli(["grade", "in.jsonl", "--out", "o", "--no-such-option"]),
                          "no-such-option")


# -- preflight -----------------------------------------------------------------------------------


def grade_llm(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path / "out.jsonl"),
                    "--metrics", "coverage", "--cache-dir", str(tmp_path / "c"), "--quiet",
                    *options])


def test_preflight_missing_credentials(tmp_path: Path) -> None:
    done = grade_llm(tmp_path, "--model", "openai/gpt-4o")
    assert_one_line_error(done, "missing credentials", "OPENAI_API_KEY")
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("model", ["gpt4o-typo", "opnai/gpt-4o"])
def test_preflight_unknown_model_or_missing_prefix(tmp_path: Path, model: str) -> None:
    assert_one_line_error(grade_llm(tmp_path, "--model", model), "unknown model", model)
    assert not (tmp_path / "out.jsonl").exists()


def test_preflight_unreachable(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    done = grade_llm(tmp_path, "--model", "openai/x", "--api-base", base)
    assert_one_line_error(done, "unreachable", base)
    assert not (tmp_path / "out.jsonl").exists()


def test_preflight_refused_key_and_unknown_model_on_the_server(tmp_path: Path) -> None:
    with OpenAIStandIn(api_key="sk-right", check_model=True) as srv:
        env = {"JUDGE_KEY": "sk-wrong"}
        done = run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path / "a.jsonl"),
                        "--model", "openai/standin", "--api-base", srv.base_url,
                        "--api-key-env", "JUDGE_KEY", "--metrics", "coverage", "--quiet"],
                       env=env)
        assert_one_line_error(done, "refused", "credentials")
        env = {"JUDGE_KEY": "sk-right"}
        done = run_cli(["grade", str(EXAMPLES), "--out", str(tmp_path / "b.jsonl"),
                        "--model", "openai/stand-in-typo", "--api-base", srv.base_url,
                        "--api-key-env", "JUDGE_KEY", "--metrics", "coverage", "--quiet"],
                       env=env)
        assert_one_line_error(done, "unknown model", "stand-in-typo")
        assert srv.stats().requests == 2  # one preflight call each, no grading call
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "b.jsonl").exists()


def test_no_preflight_skips_the_call_but_not_the_checks(tmp_path: Path) -> None:
    with OpenAIStandIn() as srv:
        done = grade_llm(tmp_path, "--model", "openai/standin", "--api-base", srv.base_url,
                         "--no-preflight")
        assert done.returncode == 0, done.stderr[-2000:]
        assert srv.stats().requests == 10  # the 10 coverage calls, no preflight
        again = grade_llm(tmp_path / "again", "--model", "openai/standin", "--api-base",
                          srv.base_url)
        assert again.returncode == 0 and srv.stats().requests == 21
    assert_one_line_error(grade_llm(tmp_path / "typo", "--model", "typo", "--no-preflight"),
                          "unknown model")


def test_mcq_llm_model_preflight(tmp_path: Path) -> None:
    done = run_cli(["mcq", str(MCQ), "--out", str(tmp_path / "m.jsonl"),
                    "--llm-model", "openai/gpt-4o"])
    assert_one_line_error(done, "missing credentials")
    assert not (tmp_path / "m.jsonl").exists()


def test_mcq_takes_the_api_key_env_its_error_suggests(tmp_path: Path) -> None:
    # Issue 28: the hint named --api-key-env, and mcq then refused it as unrecognized.
    line = assert_one_line_error(run_cli(["mcq", str(MCQ), "--out", str(tmp_path / "m.jsonl"),
                                          "--llm-model", "openai/gpt-4o"]), "missing credentials")
    assert "--api-key-env" in line
    with OpenAIStandIn(api_key="sk-right") as srv:
        command = ["mcq", str(MCQ), "--llm-model", "openai/standin", "--api-base",
                   srv.base_url, "--quiet"]
        # Without the option the stand-in refuses the preflight call (no key, or a wrong one).
        refused = run_cli([*command, "--out", str(tmp_path / "a.jsonl")])
        assert_one_line_error(refused, "refused", "credentials")
        done = run_cli([*command, "--out", str(tmp_path / "b.jsonl"), "--api-key-env",
                        "MCQ_JUDGE_KEY"], env={"MCQ_JUDGE_KEY": "sk-right"})
        assert done.returncode == 0, done.stderr[-2000:]
        assert srv.stats().outcomes.get("unauthorized") == 1  # only the run without the key
    assert (tmp_path / "b.jsonl").exists() and not (tmp_path / "a.jsonl").exists()


@pytest.mark.parametrize("command", ["grade", "mcq"])
def test_a_key_variable_set_but_empty_is_not_called_unset(tmp_path: Path, command: str) -> None:
    # Issue 28: an empty variable was reported as "not set", which sends users to export it.
    if command == "grade":
        args = ["grade", str(EXAMPLES), "--out", str(tmp_path / "o.jsonl"), "--model",
                "openai/gpt-4o"]
    else:
        args = ["mcq", str(MCQ), "--out", str(tmp_path / "o.jsonl"), "--llm-model",
                "openai/gpt-4o"]
    variable = "BJ_TEST_KEY_NEVER_SET"
    empty = run_cli([*args, "--api-key-env", variable], env={variable: ""})
    assert_one_line_error(empty, f"--api-key-env {variable}", f"{variable} is set but empty")
    blank = run_cli([*args, "--api-key-env", variable], env={variable: "  "})
    assert_one_line_error(blank, f"{variable} is set but holds only whitespace")
    unset = run_cli([*args, "--api-key-env", variable])
    assert_one_line_error(unset, f"{variable} is not set")
    # The provider's own variable, read by the preflight when no option names another one.
    provider = run_cli(args, env={"OPENAI_API_KEY": ""})
    assert_one_line_error(provider, "missing credentials", "OPENAI_API_KEY is set but empty")
    assert not (tmp_path / "o.jsonl").exists()


# -- quiet terminal, counted problems ------------------------------------------------------------


def test_library_noise_stays_off_the_terminal_and_problems_are_counted(tmp_path: Path) -> None:
    plan = FaultPlan({"malformed_json": 0.3, "server_error": 0.2}, seed=3)
    with OpenAIStandIn(faults=plan) as srv:
        done = grade_llm(tmp_path, "--model", "openai/standin", "--api-base", srv.base_url,
                         "--no-preflight")
        loud = grade_llm(tmp_path / "v", "--model", "openai/standin", "--api-base",
                         srv.base_url, "--no-preflight", "--verbose")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.strip() == "", done.stderr[-2000:]  # no litellm/instructor lines
    closing = done.stdout.strip().splitlines()[-1]
    assert "re-ask(s)" in closing and "provider_error" in closing, done.stdout[-600:]
    assert loud.returncode == 0 and len(loud.stderr) > len(done.stderr)
    summary_lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(summary_lines) == 10
