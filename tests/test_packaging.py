"""The project's own packaging: the editable install every set-up makes emits no warning (issue 23:
a fresh `make study` printed setuptools' licence deprecations, then its "Editable installation"
notice). Built with the setuptools the lock pins, through the same PEP 660 hook pip calls."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO_ROOT

_BUILD = """
import json, sys, warnings
from setuptools import build_meta
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    name = build_meta.build_editable(sys.argv[1])
print(json.dumps({"wheel": name, "warnings": [f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught]}))
"""


def test_the_editable_build_emits_no_warning(tmp_path):
    out = subprocess.run([sys.executable, "-c", _BUILD, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["wheel"].endswith(".whl") and (tmp_path / result["wheel"]).is_file()
    assert result["warnings"] == [], result["warnings"]
