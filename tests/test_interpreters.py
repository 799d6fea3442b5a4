"""Interpreter selection: found (version, path), not found, a version the lock has no wheel for.

No servers. The wheel test asks the package index (pip, wheels only) with an old interpreter from
pyenv; it is skipped where no such interpreter is installed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import interpreters
from harness.core.errors import HarnessError

CURRENT = ".".join(platform.python_version().split(".")[:2])


def _pyenv_version(prefix: str) -> str | None:
    root = interpreters.pyenv_root()
    if root is None or not (root / "versions").is_dir():
        return None
    names = [d.name for d in (root / "versions").iterdir() if d.name.startswith(prefix + ".")]
    return prefix if names else None


def test_resolve_the_running_version_answers_with_that_version():
    interp = interpreters.resolve(CURRENT)
    assert interp.version == platform.python_version()
    assert interp.tag == f"py{CURRENT}"
    # the executable recorded is one that really is that interpreter
    out = subprocess.run([interp.path, "-c", "import platform; print(platform.python_version())"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == interp.version


@pytest.mark.parametrize("minor", ["3.12", "3.13"])
def test_resolve_other_versions_from_pyenv(minor):
    if _pyenv_version(minor) is None and not interpreters.shutil.which(f"python{minor}"):
        pytest.skip(f"Python {minor} is not installed here")
    interp = interpreters.resolve(minor)
    assert interp.version.startswith(minor + ".")
    assert interp.build in ("gil", "free-threaded")
    assert interp.label == minor + ("t" if interp.gil_disabled else "")


def test_resolve_a_path_probes_it():
    exe = Path(sys.base_prefix) / "bin" / f"python{CURRENT}"
    interp = interpreters.resolve(str(exe))
    assert interp.found_by == "path"
    assert interp.version == platform.python_version()


@pytest.mark.parametrize("request_, words", [
    ("3.99", ["3.99", "not", "downloaded"]),
    ("3.99t", ["free-threaded", "3.99"]),
    ("/no/such/python3", ["/no/such/python3"]),
    ("pithon", ["pithon"]),
])
def test_not_found_is_one_clear_error_naming_it(request_, words):
    with pytest.raises(HarnessError) as e:
        interpreters.resolve(request_)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


def test_the_study_interpreter_uses_the_study_environment():
    venv = interpreters.ensure_venv(interpreters.resolve(CURRENT))
    assert venv.mode == "study"
    assert venv.python == sys.executable
    assert venv.packages.get("pymongo")


def test_a_missing_venv_is_not_built_inside_a_measurement(tmp_path):
    minor = "3.12" if _pyenv_version("3.12") else None
    if minor is None:
        pytest.skip("no second interpreter installed")
    with pytest.raises(HarnessError, match="no ready virtual environment for Python 3.12"):
        interpreters.ensure_venv(interpreters.resolve(minor), tmp_path, build=False)
    assert not (tmp_path / "py3.12").exists()


def test_free_threaded_builds_are_free_threaded():
    for interp in interpreters.free_threaded():
        assert interp.gil_disabled and interp.label.endswith("t")
    try:
        interp = interpreters.resolve("3.13t")
    except HarnessError as e:
        assert "free-threaded" in str(e) and "downloaded" in str(e)
    else:
        assert interp.gil_disabled


def test_runtime_record_names_version_and_build():
    rec = interpreters.runtime_record()
    assert rec["python"] == platform.python_version()
    assert rec["python_build"] in ("gil", "free-threaded")
    assert isinstance(rec["gil_enabled"], bool)


def test_lock_pins_follow_the_interpreters_markers():
    if not interpreters.LOCK_FILE.exists():
        pytest.skip("no requirements.lock yet")
    pins = interpreters.lock_pins(interpreters.resolve(CURRENT))
    assert "pymongo" in pins and "asyncpg" in pins
    # the lock's own pin for a client package is what the study environment has installed
    from importlib.metadata import version

    assert pins["pymongo"] == version("pymongo")


def test_an_interpreter_without_wheels_is_an_error_naming_package_and_interpreter(tmp_path):
    """Python 3.7: the lock's packages (pymongo 4.13+, pandas 2+, ...) publish no wheel for it."""
    if _pyenv_version("3.7") is None:
        pytest.skip("no Python 3.7 under pyenv")
    interp = interpreters.resolve("3.7")
    with pytest.raises(HarnessError) as e:
        interpreters.ensure_venv(interp, tmp_path)
    msg = str(e.value)
    assert "3.7" in msg and "has no wheel" in msg
    assert "package " in msg
    package = msg.split("package ", 1)[1].split()[0]
    assert package.split("==")[0].lower().replace("_", "-") in {
        line.split("==")[0].strip().lower() for line in interpreters._lock_constraints()} | {
        p.split("[")[0] for p in interpreters.CLIENT_PACKAGES}
    assert not (tmp_path / "py3.7").exists()  # a failed build leaves no half venv behind


def test_the_command_line_prepares_and_reports(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.core.interpreters", CURRENT], capture_output=True,
                         text=True, cwd=interpreters.REPO_ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.splitlines()[0])
    assert rec["mode"] == "study" and rec["interpreter"]["version"] == platform.python_version()
    assert "free-threaded builds:" in out.stderr


def test_the_command_line_skips_a_missing_version_only_when_asked():
    """Set-up (scripts/bootstrap) prepares whichever of the departures' interpreters are installed."""
    argv = [sys.executable, "-m", "harness.core.interpreters", CURRENT, "3.99"]
    strict = subprocess.run(argv, capture_output=True, text=True, cwd=interpreters.REPO_ROOT, timeout=120)
    assert strict.returncode == 2 and "no Python 3.99 found" in strict.stderr
    lenient = subprocess.run([*argv, "--installed"], capture_output=True, text=True, cwd=interpreters.REPO_ROOT,
                             timeout=120)
    assert lenient.returncode == 0, lenient.stderr
    assert "skipped: --python 3.99" in lenient.stderr
    assert [json.loads(line)["mode"] for line in lenient.stdout.splitlines()] == ["study"]


def test_tools_that_stay_on_the_study_interpreter_find_it(monkeypatch):
    monkeypatch.delenv("HARNESS_STUDY_PYTHON", raising=False)
    assert interpreters.study_python() == sys.executable
    monkeypatch.setenv("HARNESS_STUDY_PYTHON", "/opt/study/bin/python")
    assert interpreters.study_python() == "/opt/study/bin/python"


def test_a_newer_version_resolves_by_the_same_rules(tmp_path, monkeypatch):
    """`--python 3.14` (the seeds' interpreter, not installed on these machines): nothing in the lookup
    is tied to the versions installed here. A stand-in `python3.14` on PATH answers the probe."""
    exe = tmp_path / "python3.14"
    exe.write_text("#!/bin/sh\necho '{\"version\": \"3.14.0\", \"implementation\": \"cpython\", "
                   "\"gil_disabled\": false, \"executable\": \"'\"$0\"'\", "
                   "\"prefix\": \"/x\", \"base_prefix\": \"/x\"}'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    interp = interpreters.resolve("3.14")
    assert (interp.version, interp.label, interp.tag, interp.found_by) == ("3.14.0", "3.14", "py3.14", "PATH")
    assert interp.path == str(exe)
    from harness.experiments.departures import analysis as departures

    cells = departures.pd.DataFrame({"python": ["3.13", "3.14", "3.11", "3.12"]})
    assert departures.levels(cells, "python") == ("3.11", ["3.12", "3.13", "3.14"])


def test_the_command_line_refuses_a_malformed_pin(capsys):
    assert interpreters.main(["--pin", "pymongo", CURRENT]) == 2
    assert "expected NAME==VERSION" in capsys.readouterr().err
