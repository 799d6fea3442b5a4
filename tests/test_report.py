"""The report: every notebook executed by papermill on a real smoke run, figures with provenance,
one self-contained HTML file that headless Chromium renders with its figures."""

from __future__ import annotations

import html as html_lib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from conftest import snapshot

from harness.core import store
from harness.core.errors import HarnessError
from harness.experiments import registry
from harness.judging import claims, findings
from harness.writing import notebook, report

REPO_ROOT = Path(__file__).resolve().parent.parent
PARAMETERS = ("run_dir", "figures_dir", "figure_formats")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


@pytest.fixture(scope="module")
def built(smoke_report):
    """`report.build` on the smoke run (conftest's `smoke_report`, shared with the families' tests)."""
    return smoke_report


def test_notebooks_are_parameterised_and_committed_without_outputs():
    nbs = report.notebooks()
    assert nbs[0].name == "00_findings.ipynb", "the report opens with the findings"
    for path in nbs:
        nb = nbformat.read(path, as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged `parameters`"
        for name in PARAMETERS:
            assert re.search(rf"^{name}\s*:\s*str\s*=.*#", tagged[0].source, re.M), \
                f"{path.name}: parameter {name} needs a type and a comment"
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs and c.execution_count is None, f"{path.name}: committed with outputs"


def test_every_notebook_runs_on_the_smoke_run(built):
    assert built.error is None, str(built.error)
    executed = built.run.path / "report" / "notebooks"
    for path in report.notebooks():
        out = executed / path.name
        assert out.exists(), f"no executed copy of {path.name}"
        nb = nbformat.read(out, as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if o.output_type == "error"]
        assert not errors, f"{path.name}: {errors[0].ename}: {errors[0].evalue}"
        injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert injected and str(built.run.path.resolve()) in injected[0].source


def test_figures_and_their_manifest(built):
    manifest_path = built.figures / "manifest.json"
    assert manifest_path.exists(), "no figures/manifest.json"
    manifest = json.loads(manifest_path.read_text())
    entries = manifest["figures"]
    assert entries, "the notebooks saved no figure"
    listed = set()
    for name, e in entries.items():
        for f in e["files"]:
            assert (built.figures / f).stat().st_size > 0, f"{name}: {f} missing or empty"
            listed.add(f)
        assert {Path(f).suffix for f in e["files"]} == {".png", ".svg", ".pdf"}, name
        assert e["run_id"] == built.run.id, name
        run_path = (built.figures / e["run_path"]).resolve()
        assert run_path == built.run.path.resolve(), f"{name}: run_path {e['run_path']}"
        assert store.Run(run_path).id == built.run.id
        for raw in e["raw_data"]:
            assert (run_path / raw).is_file(), f"{name}: raw file {raw} does not exist"
        assert e["notebook"], name
        nb = Path(e["notebook"])
        assert (REPO_ROOT / nb).exists() or (REPO_ROOT / "notebooks" / nb.name).exists(), \
            f"{name}: notebook {e['notebook']} does not exist"
        assert e["git_sha"] == built.run.manifest["environment"]["git"]["sha"]
    on_disk = {p.name for p in built.figures.iterdir() if p.name != "manifest.json"}
    assert on_disk == listed, f"figures not in the manifest: {sorted(on_disk - listed)}"
    assert snapshot(report.FIGURES_DIR) == built.committed_before, "the tests touched figures/"


# Each family notebook shows, through `notebook.show`, the headline table of each of its experiments.
SHOWN = {"01_mongo_cursor_pool.ipynb": ("mongo_cursor", "mongo_pool"),
         "02_mongo_client_bulk_models.ipynb": ("mongo_client", "mongo_bulk", "mongo_models"),
         "03_postgres_models.ipynb": ("pg_models", "pg_ceiling")}


@pytest.mark.parametrize("nb, experiments", SHOWN.items())
def test_notebook_tables_hold_the_runs_figures(built, nb, experiments):
    """The headline table a notebook printed is the run's figures: every headline metric of every
    variant, each the median (and n) of the per-repeat values the analysis module gives."""
    tables = notebook.shown(built.run.path / "report" / "notebooks" / nb)
    for e in experiments:
        assert f"{e}.headline" in tables, f"{nb} showed no headline table of {e}: {sorted(tables)}"
        shown = tables[f"{e}.headline"]
        exp = registry.get(e)
        frame = claims.experiment_metrics(built.run, e)
        frame = frame[(frame["experiment"] == e) & frame["metric"].isin([m.name for m in exp.headline])]
        assert len(shown) == frame.groupby(["variant", "metric"]).ngroups > 0
        for _, row in shown.iterrows():
            variant = "" if row["variant"] is None or row["variant"] != row["variant"] else str(row["variant"])
            values = frame[(frame["variant"] == variant) & (frame["metric"] == row["metric"])]["value"]
            assert row["n"] == len(values) > 0, (e, variant, row["metric"])
            assert math.isclose(row["median"], statistics.median(values), rel_tol=1e-9), (e, variant, row["metric"])


def test_pool_sweep_table_covers_every_pool_size(built):
    tables = notebook.shown(built.run.path / "report" / "notebooks" / "02_mongo_client_bulk_models.ipynb")
    sweep = tables["mongo_models.pool_sweep"]
    pools = built.run.experiments["mongo_models"]["params"]["pool_sweep"]
    tput = sweep[sweep["metric"] == "throughput_qps"]
    assert sorted(tput["variant"]) == sorted(f"async_pool{p}" for p in pools)
    assert (tput["median"] > 0).all()
    ratio = sweep[sweep["metric"] == "smallest_over_best_qps"]["median"]
    assert len(ratio) == 1 and 0 < ratio.iloc[0] <= 1


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: `bash scripts/bootstrap --test` (or apt-get install chromium)")
    return exe


def test_html_report_renders_its_figures_in_chromium(built, tmp_path):
    html = built.index.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*src=\"https?://", html), "the report loads scripts from the network"
    r = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                        "--dump-dom", built.index.resolve().as_uri()],
                       capture_output=True, text=True, timeout=120)
    dom = r.stdout
    assert r.returncode == 0 and "<body" in dom, f"chromium failed ({r.returncode}): {r.stderr[-2000:]}"
    imgs = re.findall(r"<img\b[^>]*>", dom)
    assert len(imgs) > 0, "the rendered report has no <img>"
    for tag in imgs:
        src = re.search(r'\bsrc="([^"]*)"', tag)
        assert src and src.group(1).startswith("data:image/"), f"image not embedded: {tag[:200]}"
        alt = re.search(r'\balt="([^"]+)"', tag)
        assert alt and alt.group(1).startswith("Figure: "), f"an image without alt text: {tag[:200]}"
    # nothing a kernel wrote to stderr (a warning such as "Tight layout not applied") shows in the page
    stderr = re.findall(r'data-mime-type="application/vnd.jupyter.stderr"[^>]*>(.*?)</div>', dom, re.S)
    assert not stderr, f"the report shows {len(stderr)} stderr output(s), first: {_text(stderr[0])[:300]}"
    for path in report.notebooks():
        assert path.name in dom, f"{path.name} is missing from the report"
    listed = dom.split('id="notebooks-run"', 1)
    assert len(listed) == 2, "the report does not list the notebooks it ran (at its end)"
    assert "failed:" not in listed[1].split("</ol>", 1)[0], "the report lists a failed notebook"
    assert "notebook(s) failed" not in dom
    assert built.run.id in dom


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()


def test_the_first_screen_is_the_twelve_lessons(built, tmp_path):
    """Chromium at 1400×1000: under the title and a caveat of under 600 characters, the answer's
    table (one row per lesson, each with its verdict badge) ends on the first screen; each lesson's
    detail follows, collapsible, and the run's plumbing comes after."""
    page = built.index.read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"    # the page, with a script that writes the table's layout into the DOM
    probe.write_text(page.replace("</body>", "<script>const t = document.querySelector('table.answer');"
                                  "document.body.dataset.rows = t.tBodies[0].rows.length;"
                                  "document.body.dataset.bottom = Math.ceil(t.getBoundingClientRect().bottom);"
                                  "</script></body>", 1), encoding="utf-8")
    r = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                        "--window-size=1400,1000", "--dump-dom", probe.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = re.search(r'data-rows="(\d+)"', r.stdout)
    bottom = re.search(r'data-bottom="(\d+)"', r.stdout)
    assert rows and bottom, "the answer table was not found in the rendered page"
    assert int(rows.group(1)) == len(findings.LESSONS)
    assert int(bottom.group(1)) <= 1000, f"the answer table ends at {bottom.group(1)} px, below the first screen"
    dom = r.stdout
    title = re.search(r"<h1\b[^>]*>(.*?)</h1>", dom, re.S)
    table = dom.index('<table class="answer"')
    assert title and _text(title.group(1)).startswith("Async database access in Python: what to do")
    assert len(_text(dom[title.end():table])) < 600, _text(dom[title.end():table])
    assert dom.count("<details") >= len(findings.LESSONS)
    assert dom.index('id="notebooks-run"') > dom.index("<details")


def test_rendered_report_opens_with_findings_and_no_table_shows_nan(built, tmp_path):
    """Read the page as Chromium renders it (not the notebooks): after the answer, the first notebook
    section is Findings, it holds a verdict for every lesson, and no table cell anywhere reads NaN."""
    r = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                        "--dump-dom", built.index.resolve().as_uri()],
                       capture_output=True, text=True, timeout=120)
    dom = r.stdout
    assert r.returncode == 0 and "<body" in dom, f"chromium failed ({r.returncode}): {r.stderr[-2000:]}"
    titles = [(m.start(), _text(m.group(1))) for m in re.finditer(r"<h1\b[^>]*>(.*?)</h1>", dom, re.S)]
    assert len(titles) >= 3, f"the rendered report has too few sections: {[t for _, t in titles]}"
    assert titles[0][1].startswith("Async database access in Python: what to do"), titles[0]
    assert titles[1][1] == "Findings", f"the first section is {titles[1][1]!r}, not Findings"
    # the first screen is the lessons: the plumbing (parameters, local paths, the notebook list) is at the end
    assert "run_dir=" not in dom[:titles[1][0]] and 'id="notebooks-run"' not in dom[:titles[1][0]]
    assert titles[-1][1] == "About this report", titles[-1]
    section = dom[titles[1][0]:titles[2][0]]
    for lesson in findings.LESSONS:
        assert html_lib.escape(lesson.words, quote=False)[:60] in section, f"{lesson.id} is not in Findings"
    assert section.count('class="verdict-badge"') == len(findings.LESSONS), "a lesson has no verdict badge"
    # the starvation bars, the stall probe, throughput against the pool bound, the staircase
    assert section.count("<img") >= 4, "the Findings section lacks one of its four figures"
    cells = [(m.start(), _text(m.group(2))) for m in re.finditer(r"<t([dh])\b[^>]*>(.*?)</t\1>", dom, re.S)]
    assert cells, "the rendered report has no table"
    nan = Counter(next(t for pos, t in reversed(titles) if pos < at) for at, c in cells
                  if re.search(r"\bnan\b", c, re.I))
    assert not nan, f"table cells show NaN, per section: {dict(nan)}"


def test_code_is_hidden_unless_asked_for(built, tmp_path):
    executed = built.run.path / "report" / "notebooks" / "00_summary.ipynb"
    nb = nbformat.read(executed, as_version=4)
    editor = re.compile(r'class="[^"]*jp-InputArea-editor')  # the lab template's code input box
    hidden = report.export_html(nb, tmp_path / "hidden.html").read_text()
    shown = report.export_html(nb, tmp_path / "shown.html", keep_code=True).read_text()
    assert not editor.search(hidden)
    assert editor.search(shown) and "evaluate" in shown


def _notebook(path: Path, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        'run_dir: str = "../data/runs/latest"  # run\nfigures_dir: str = "../figures"  # figures\n'
        'figure_formats: str = "png"  # formats', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, path)


def test_a_failing_notebook_is_reported_and_the_others_still_run(smoke_run, tmp_path):
    # a copy of the real run's manifest, so this report does not replace the smoke run's
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(smoke_run.path / "manifest.json", run_dir / "manifest.json")
    run = store.Run(run_dir)
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    _notebook(nbs / "00_first.ipynb", "print('first ran')")
    _notebook(nbs / "01_broken.ipynb", "x = 1\nraise RuntimeError('deliberately broken')")
    _notebook(nbs / "02_after.ipynb", "print('after ran')")
    with pytest.raises(HarnessError) as info:
        report.build(run, notebooks_dir=nbs, figures=tmp_path / "figures")
    message = str(info.value)
    assert "1 of 3 notebooks failed" in message
    assert "01_broken.ipynb" in message and "RuntimeError: deliberately broken" in message
    assert re.search(r"cell \d+ \(In \[\d+\]\)", message)
    executed = run_dir / "report" / "notebooks"
    assert {p.name for p in executed.iterdir()} == {"00_first.ipynb", "01_broken.ipynb", "02_after.ipynb"}
    after = nbformat.read(executed / "02_after.ipynb", as_version=4)
    assert "after ran" in after.cells[-1].outputs[0]["text"]
    html = (run_dir / "report" / "index.html").read_text()
    assert "01_broken.ipynb" in html and "deliberately broken" in html


def test_tables_kept_for_the_tests_stay_out_of_the_html_without_a_warning(tmp_path):
    """`notebook.show()` keeps each table as vendor JSON in the executed notebook (read by the
    tests); the HTML cannot show it, so the export drops it instead of warning once per table."""
    import warnings

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("show(t)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": "<p>the table</p>"}),
                    nbformat.v4.new_output("display_data", data={notebook.TABLE_MIME: {"key": "t", "table": {}}})]
    nb.cells.append(cell)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = report.export_html(nb, tmp_path / "index.html")
    assert not [w for w in caught if "not able to be represented" in str(w.message)], [str(w.message) for w in caught]
    body = out.read_text()
    assert "the table" in body and notebook.TABLE_MIME not in body
    assert len(nb.cells[0].outputs) == 2   # the executed notebook (the caller's) keeps both


def test_a_report_that_succeeds_prints_nothing_from_its_kernels(tmp_path):
    """The kernels talk over IPC and end with a shutdown request: no "Kernel is running over TCP
    without encryption" warning per kernel, no "KeyboardInterrupt caught in kernel" ERROR after a
    notebook that ran to the end, and no socket left behind."""
    import sys

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(next((REPO_ROOT / "data" / "reference").glob("*/manifest.json")), run_dir / "manifest.json")
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    for k in range(3):
        _notebook(nbs / f"0{k}_quick.ipynb", "from ipykernel.connect import get_connection_info\n"
                                             "print(get_connection_info(unpack=True)['transport'])")
    sockets = tmp_path / "tmp"
    sockets.mkdir()
    code = (f"from harness.writing import report\nfrom harness.core import store\n"
            f"report.build(store.Run({str(run_dir)!r}), notebooks_dir={str(nbs)!r}, figures={str(tmp_path / 'f')!r})")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(sockets)})
    assert done.returncode == 0, done.stderr
    kernel_lines = [line for line in done.stderr.splitlines() if "IPKernelApp" in line or "KeyboardInterrupt" in line]
    assert not kernel_lines, kernel_lines
    executed = nbformat.read(run_dir / "report" / "notebooks" / "00_quick.ipynb", as_version=4)
    assert executed.cells[-1].outputs[0]["text"].strip() == "ipc"
    assert not list(sockets.iterdir()), "the kernels' socket directory outlived the report"


@pytest.mark.parametrize("moment", ["kernels starting", "kernels running"])
def test_an_interrupted_report_stops_its_notebooks_at_once(tmp_path, moment):
    """Ctrl-C while two notebooks run side by side, or before their kernels have started (the
    workers still importing papermill or launching the kernels): no queued notebook starts, no
    kernel outlives the interrupt, and the process ends within seconds instead of finishing its
    notebooks (each sleeps 120 s here)."""
    import signal
    import sys
    import time

    import psutil

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    reference = next((REPO_ROOT / "data" / "reference").glob("*/manifest.json"))   # any run's manifest
    shutil.copy(reference, run_dir / "manifest.json")
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    for k in range(4):
        _notebook(nbs / f"0{k}_slow.ipynb", "import time\ntime.sleep(120)")
    # Python's own Ctrl-C handler even if this test runs with SIGINT ignored (a background job of
    # a non-interactive shell): the child would ignore the signal too, and the test would be moot.
    code = (f"import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            f"from harness.writing import report\nfrom harness.core import store\n"
            f"report.build(store.Run({str(run_dir)!r}), notebooks_dir={str(nbs)!r}, figures={str(tmp_path / 'f')!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        parent = psutil.Process(proc.pid)

        def kernels() -> list[psutil.Process]:
            found = []
            for c in parent.children(recursive=True):
                try:
                    if "ipykernel" in " ".join(c.cmdline()):
                        found.append(c)
                except psutil.Error:
                    pass
            return found

        if moment == "kernels starting":
            seen = ""
            while "report" not in seen and proc.poll() is None:   # the progress bar: build() has begun
                seen += proc.stderr.read(1)
            assert not kernels(), "the kernels started before the progress bar"
        else:
            deadline = time.monotonic() + 90
            while len(kernels()) < 2 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
            assert len(kernels()) == 2, "two notebooks should run side by side"
            time.sleep(2.0)   # both kernels busy in their cell
        running = kernels()
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        proc.wait(timeout=60)
        assert time.monotonic() - started < 20, "the report went on after Ctrl-C"
        assert not [k for k in running if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
        # no kernel started after the interrupt either: every kernel names its parent in its environment
        late = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if "ipykernel" in " ".join(p.info["cmdline"] or ()) and \
                        p.environ().get("JPY_PARENT_PID") == str(proc.pid):
                    late.append(p)
            except psutil.Error:
                pass
        assert not late, "a kernel outlived the interrupted report"
        executed = {p.name for p in (run_dir / "report" / "notebooks").glob("*.ipynb")}
        assert not executed & {"02_slow.ipynb", "03_slow.ipynb"}, "a queued notebook started after Ctrl-C"
    finally:
        if proc.poll() is None:
            for k in kernels():
                k.kill()
            proc.kill()
            proc.wait(timeout=10)


def test_every_embedded_image_gets_its_sections_description_as_alt_text():
    """nbconvert writes no alt text (or "No description has been provided"): each image takes the
    heading and first sentence of the markdown before it, in order; when the counts differ, none is
    guessed."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## Pool starvation (seed 001)\n\nMore tasks than connections. Then more."),
        nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("display_data", data={"image/png": "AAA"}),
                                           nbformat.v4.new_output("display_data", data={"image/png": "BBB"})]),
        nbformat.v4.new_code_cell(metadata={"tags": ["parameters"]},
                                  outputs=[nbformat.v4.new_output("display_data", data={"image/png": "CCC"})]),
    ])
    alts = report.figure_descriptions(nb)
    assert alts == ["Figure: Pool starvation (seed 001). More tasks than connections",
                    "Figure: Pool starvation (seed 001). More tasks than connections (figure 2 of this section)"]
    body = ('<img alt="No description has been provided for this image" class="" src="data:image/png;base64,AAA">'
            '<img src="data:image/png;base64,BBB" width="3">')
    out = report.with_alt_text(body, alts)
    assert re.findall(r'alt="([^"]*)"', out) == alts and "No description" not in out and 'width="3"' in out
    assert report.with_alt_text(body, alts[:1]) == body


def test_the_pages_pngs_are_stored_with_a_palette_when_that_is_smaller(tmp_path):
    """Each PNG of the page is re-encoded with 256 colours, onto white: it still decodes, to the same
    size in pixels, in fewer bytes; what is not a readable PNG is left as it is."""
    import base64
    import io

    from matplotlib.figure import Figure
    from PIL import Image

    fig = Figure(figsize=(4, 3), dpi=100)
    ax = fig.subplots()
    for k in range(12):
        ax.plot([math.sin(x / 7 + k) * (k + 1) for x in range(200)], lw=0.8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", transparent=True)   # RGBA, antialiased: thousands of colours
    png = buf.getvalue()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## A figure\n\nLines."),
        nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
            "display_data", data={"image/png": base64.b64encode(png).decode()})])])
    page = report.export_html(nb, tmp_path / "index.html").read_text()
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(embedded) == 1
    stored = base64.b64decode(embedded[0])
    with Image.open(io.BytesIO(stored)) as im, Image.open(io.BytesIO(png)) as original:
        im.load()
        assert im.format == "PNG" and im.mode == "P" and im.size == original.size
        assert len(im.getcolors(256) or []) <= 256
        corner = im.convert("RGB").getpixel((0, 0))
    assert corner == (255, 255, 255), "transparency composited onto white"
    assert len(stored) < len(png), (len(stored), len(png))
    assert report.with_palette_pngs('<img src="data:image/png;base64,AAA">') == '<img src="data:image/png;base64,AAA">'
    assert report.palette_png(stored) is stored or len(report.palette_png(stored)) < len(stored)


def test_a_run_of_some_experiments_gets_the_notebooks_that_read_them():
    """The findings and the summary read any run; a family's notebook only a run with one of the
    experiments that declare it (a kernel and its imports saved per notebook left out)."""
    def names(*experiments: str) -> list[str]:
        run = SimpleNamespace(id="r", experiments={e: {} for e in experiments})
        return [nb.name for nb in report.notebooks_for(run)]

    assert names("mongo_client", "pg_models") == ["00_findings.ipynb", "00_summary.ipynb",
                                                   "02_mongo_client_bulk_models.ipynb", "03_postgres_models.ipynb"]
    assert names(*registry.all_experiments()) == [nb.name for nb in report.notebooks()]
    assert names("openloop_check") == ["00_findings.ipynb", "00_summary.ipynb"]   # declares none
    assert names("verify_postgres") == [report.WORKLOAD_NOTEBOOK]
    with pytest.raises(HarnessError, match="no experiment a notebook reads"):
        names()
