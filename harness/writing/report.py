"""Notebooks executed with papermill against a run, exported to one HTML report.

`build(run)` executes the notebooks in `notebooks/` that fit the run (`notebooks_for`: the findings,
the summary and the notebook each of the run's experiments declares, and `06_workload.ipynb` for a
run of `harness verify`) with papermill, two at a time, each in its
own kernel, in `notebooks/` as working directory, with the parameters every notebook declares:

    run_dir        the run's absolute path
    figures_dir    where figures and figures/manifest.json go (see `figures_dir()`)
    figure_formats which formats `save_figure` writes

The executed copies go to `<run>/report/notebooks/`, and one self-contained HTML file (images
embedded as data: URIs, no script loaded from the network) to `<run>/report/index.html`; each PNG
in it is stored with a palette of 256 colours when that is smaller (`palette_png`: a figure of lines
and text on white loses nothing visible and about two thirds of its bytes). Code cells
are hidden unless `keep_code=True`. A notebook that fails does not stop the others: its executed
copy (with papermill's error banner) is still in the report, the failure is listed at the top of
the report with the notebook, the cell and the error, and `build()` raises `HarnessError` at the
end naming every failure.

The kernels talk to the report over IPC (Unix sockets in a private temporary directory), not TCP on
loopback, and end with a shutdown request, not a SIGINT (`_kernel_manager`): a report that succeeds
prints no kernel warning or error. A Ctrl-C stops every kernel of the build, those still starting
included, and no queued notebook starts (`_Kernels`).
"""

from __future__ import annotations

import base64
import binascii
import copy
import html
import io
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from ..core import config, figures
from ..core.config import REPO_ROOT
from ..core.errors import HarnessError
from ..core.measure import error_text
from ..core.store import Run
from ..experiments import registry

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
FIGURES_DIR = config.CITABLE_FIGURES          # the reference run's figures, committed
FIGURES_ENV = "STUDY_FIGURES_DIR"
FIGURE_FORMATS = "png,svg,pdf"
KERNEL_NAME = "python3"
REPORT_WORKERS = 2                             # notebooks executed at once (capped by the cores)
CELL_TIMEOUT_S = 900                           # one cell; the notebooks only read and plot
# Cells hidden from the HTML even with keep_code (the parameters are listed in the report header).
REMOVE_CELL_TAGS = {"parameters", "injected-parameters", "remove_cell"}
REMOVE_INPUT_TAGS = {"hide_input"}
_EXTERNAL_SCRIPT = re.compile(r"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>\s*", re.I)
_EMBEDDED_IMAGE = re.compile(r"<img\b([^>]*\bsrc=\"data:image/[^>]*)>")
_ALT = re.compile(r"\s*\balt=\"[^\"]*\"")
_EMBEDDED_PNG = re.compile(r"(data:image/png;base64,)([A-Za-z0-9+/=\r\n]+)")
PALETTE_COLOURS = 256   # a PNG of the page is re-encoded with this many colours at most (median cut)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")


@dataclass(frozen=True)
class Failure:
    """One notebook that did not run to the end."""

    notebook: str
    cell: int | None            # index in the executed copy (papermill's), None if it never started
    execution_count: int | None
    error: str                  # "ExceptionName: message"
    source: str = ""            # the failing cell's code

    def __str__(self) -> str:
        where = (f"cell {self.cell} (In [{self.execution_count}])" if self.cell is not None
                 else "before any cell ran")
        first = self.source.strip().splitlines()[0][:120] if self.source.strip() else ""
        return f"{self.notebook}: {where}: {self.error}" + (f"  [code: {first}]" if first else "")


def figures_dir(run: Run, override: str | Path | None = None) -> Path:
    """Where a report of `run` saves its figures: `override`, else `figures.default_dir(run)`."""
    return Path(override).expanduser().resolve() if override else figures.default_dir(run)


def notebooks(notebooks_dir: str | Path = NOTEBOOKS_DIR) -> list[Path]:
    """Every notebook of the study, in the order they run (by name: 00_findings first, then 00_summary)."""
    found = sorted(p for p in Path(notebooks_dir).glob("*.ipynb") if not p.name.startswith("."))
    if not found:
        raise HarnessError(f"no notebooks in {notebooks_dir}")
    return found


WORKLOAD_NOTEBOOK = "06_workload.ipynb"   # `harness verify`'s page: only for runs of a verify experiment


def notebooks_for(run: Run, notebooks_dir: str | Path = NOTEBOOKS_DIR) -> list[Path]:
    """The notebooks a run's report holds: the workload page when the run has a verify experiment
    (`harness verify`); when it has any other, the study's notebooks that read the whole run (the
    findings and the summary, which no experiment declares) and the notebook each of its
    experiments declares. A family's notebook on a run without that family would only say so, after
    a kernel start and its imports."""
    names = set(run.experiments)
    declared = {n: e.notebook for n, e in registry.all_experiments().items()}   # each experiment's own
    verify = any(declared.get(n) == WORKLOAD_NOTEBOOK for n in names)
    study = any(declared.get(n) != WORKLOAD_NOTEBOOK for n in names)
    in_run = {declared.get(n) for n in names}
    chosen = [nb for nb in notebooks(notebooks_dir)
              if (verify if nb.name == WORKLOAD_NOTEBOOK
                  else study and (nb.name in in_run or nb.name not in declared.values()))]
    if not chosen:
        raise HarnessError(f"run {run.id} has no experiment a notebook reads")
    return chosen


class _Kernels:
    """The kernels of one build, and where their sockets live.

    `stop()` (on Ctrl-C) kills every kernel started so far and makes any later start fail: a worker
    that was still importing papermill or launching its kernel when the interrupt came would
    otherwise start a kernel nobody stops, and the build would wait for its notebook to end.
    """

    def __init__(self) -> None:
        self.sockets = Path(tempfile.mkdtemp(prefix="harness-kernels-"))
        self._lock = threading.Lock()
        self._processes: list[Any] = []   # the kernels' subprocess.Popen objects
        self._count = 0
        self.stopped = False

    def __enter__(self) -> _Kernels:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.sockets, ignore_errors=True)

    def socket_prefix(self) -> str:
        """A path prefix no other kernel of this build uses (jupyter_client appends `-<n>`)."""
        with self._lock:
            self._count += 1
            return str(self.sockets / f"k{self._count}")

    def started(self, process: Any) -> bool:
        """Record a kernel just launched; False once the build is stopped (the caller kills it)."""
        with self._lock:
            if not self.stopped:
                self._processes.append(process)
            return not self.stopped

    def stop(self) -> None:
        """No kernel starts from now on, and every running one is killed."""
        with self._lock:
            self.stopped = True
            processes = list(self._processes)
        for process in processes:
            try:
                process.kill()   # Popen.kill: no signal to a process already reaped
            except OSError:
                pass


def _kernel_manager(kernels: _Kernels) -> type:
    """A jupyter_client kernel manager for one build's kernels. Unlike the default, it
    - binds the kernel's sockets to Unix sockets under `kernels.sockets` (transport `ipc`): no port
      on loopback, and no "Kernel is running over TCP without encryption" warning from each kernel;
    - shuts a kernel down with the shutdown request alone: jupyter_client interrupts the kernel
      first, and a SIGINT that lands while the kernel handles a message is logged by ipykernel as
      `ERROR | KeyboardInterrupt caught in kernel.` after a notebook that ran to the end;
    - registers each kernel with `kernels`, and refuses to start one once the build is stopped."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class ReportKernelManager(AsyncKernelManager):  # type: ignore[misc]
        @default("transport")
        def _default_transport(self) -> str:
            return "ipc"

        @default("ip")
        def _default_ip(self) -> str:
            return kernels.socket_prefix()

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            if kernels.stopped:
                raise HarnessError("report interrupted: no kernel started")
            await super()._async_launch_kernel(kernel_cmd, **kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None and not kernels.started(process):
                process.kill()
                raise HarnessError("report interrupted while this notebook's kernel started")

        async def _async_interrupt_kernel(self) -> None:
            if not self.shutting_down:   # shutting down: the shutdown request alone, no SIGINT first
                await super()._async_interrupt_kernel()

    return ReportKernelManager


def execute(notebook: Path, output: Path, run: Run, figures: Path,
            formats: str = FIGURE_FORMATS, kernels: _Kernels | None = None) -> Failure | None:
    """Run one notebook with papermill; the executed copy is written to `output` even on failure.
    `kernels`: the build's (`build()`); a notebook executed on its own gets its own."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    output.parent.mkdir(parents=True, exist_ok=True)
    params = {"run_dir": str(run.path.resolve()), "figures_dir": str(figures),
              "figure_formats": formats}
    with nullcontext(kernels) if kernels is not None else _Kernels() as mine:
        try:
            papermill.execute_notebook(str(notebook), str(output), parameters=params,
                                       kernel_name=KERNEL_NAME, cwd=str(notebook.parent),
                                       progress_bar=False, request_save_on_cell_execute=False,
                                       execution_timeout=CELL_TIMEOUT_S,
                                       kernel_manager_class=_kernel_manager(mine))
        except PapermillExecutionError as e:
            return Failure(notebook.name, e.cell_index, e.exec_count, f"{e.ename}: {e.evalue}",
                           e.source or "")
        except Exception as e:  # kernel died, timeout, unreadable notebook: still report, keep going
            return Failure(notebook.name, None, None, error_text(e, 2000))
    return None


def _section_header(nb_name: str, index: int, failure: Failure | None, executed: Path,
                    report_dir: Path) -> nbformat.NotebookNode:
    rel = os.path.relpath(executed, report_dir)
    status = (f'<p style="color:#b00020"><b>This notebook failed</b>: {html.escape(str(failure))}</p>'
              if failure else "")
    return nbformat.v4.new_markdown_cell(
        f'<a id="nb-{index}"></a>\n\n---\n\n<p style="color:#555">Notebook <code>{html.escape(nb_name)}'
        f'</code> &mdash; executed copy: <a href="{html.escape(rel)}">{html.escape(rel)}</a></p>\n\n'
        f"{status}")


CAVEAT = ("The MongoDB role is FerretDB on PostgreSQL, not MongoDB; the machines are shared 2-core virtual "
          "machines. Directions travel to your service; sizes depend on the machine and the server.")


def _preface(run: Run, executed: list[tuple[Path, Path, Failure | None]]) -> nbformat.NotebookNode:
    """The report's first screen: the title, the caveat and the twelve lessons (`answer.rows`: verdict
    badge, short name, this run against the seed, across machines), then each lesson's detail, one
    collapsible section each; the run, its servers and the notebooks follow below."""
    failed = [nb.name for nb, _out, failure in executed if failure]
    warning = (f'<p style="color:#b00020"><b>{len(failed)} notebook(s) failed</b>: '
               f'{html.escape(", ".join(failed))} (<a href="#about-this-report">details</a>).</p>\n\n'
               if failed else "")
    text = ("# Async database access in Python: what to do, measured\n\n"
            f"<p>{html.escape(CAVEAT)}</p>\n\n" + warning + lessons_html(run))
    return nbformat.v4.new_markdown_cell(text)


def _lesson_inputs(run: Run) -> tuple[dict[str, Any], dict, dict]:
    """This run's summary, and the lessons pooled over the committed runs with this one."""
    from ..core import pooling, store
    from ..judging import answer, summary

    summ = store.upgrade_summary(summary.load(run), str(run.path))
    runs = pooling.committed_runs()
    if run.id not in {r.run_id for r in runs}:
        runs.append(pooling.record(summ, run.manifest, run.id))
    claims = [lesson.claims[0] for lesson in answer.findings.LESSONS]
    pooled = {str(r["claim_id"]): r for r in pooling.pooled_lessons(runs, claims).to_dict("records")}
    return summ, pooled, answer.kinds_pooled(runs)


def _markdown_inline(text: str) -> str:
    """`**word**` as bold and `code` as code, the rest escaped: the answer's cells are markdown."""
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"\*(.+?)\*", r"<i>\1</i>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


def lessons_html(run: Run) -> str:
    """The answer table (one row per lesson) and, below it, each lesson's detail in a <details>."""
    from ..core.verdicts import colour
    from ..judging import answer

    summ, pooled, kinds = _lesson_inputs(run)
    rows = answer.rows(summ, pooled, kinds)
    head = ('<table class="answer" style="font-size:13px;line-height:1.25"><thead><tr><th></th><th>lesson</th>'
            "<th>what to do</th><th>this run (against the seed)</th><th>across machines</th></tr></thead><tbody>")
    body = []
    for r in rows:
        badge = (f'<span style="background:{colour(r["here_word"])};color:white;border-radius:4px;padding:1px 5px;'
                 f'white-space:nowrap;font-weight:bold">{html.escape(answer.short_word(r["here_word"]))}</span>')
        body.append(f'<tr><td>{badge}</td><td><a href="#lesson-{r["id"]}">{_markdown_inline(r["lesson"])}</a></td>'
                    f"<td>{_markdown_inline(r['do'])}</td><td>{_markdown_inline(r['here'])}</td>"
                    f"<td>{_markdown_inline(r['across'])}</td></tr>")
    legend = f'<p style="font-size:12px;color:#444">{_markdown_inline(answer.LEGEND)}</p>'
    by_id = answer.findings.claims_by_id(summ)
    details = [_lesson_details(lesson, summ, by_id) for lesson in answer.findings.LESSONS]
    m = run.manifest
    servers = "; ".join(f"{role}: {html.escape(run.server_label(role))}" for role in m.get("servers", {}))
    about = (f"<p>Run <code>{html.escape(run.id)}</code> (profile <b>{html.escape(str(m.get('profile')))}</b>, "
             f"status {html.escape(str(m.get('status')))}). Servers: {servers or 'none recorded'}. The notebooks, "
             'their parameters and how this page was built: <a href="#about-this-report">at the end</a>.</p>')
    return head + "".join(body) + "</tbody></table>\n\n" + legend + "\n\n## Each lesson\n\n" + \
        "\n".join(details) + "\n\n" + about


def _lesson_details(lesson: Any, summ: dict[str, Any], by_id: Mapping[str, Any]) -> str:
    """One lesson's ledger rows in this run, each with its verdict and figure (the interval at the
    verdict's level beside the 90% one), in a collapsible section."""
    from ..judging import findings

    items = []
    for claim_id in lesson.claims:
        c = by_id.get(claim_id)
        if c is None:
            continue
        at_verdict = findings.verdict_interval(summ, claim_id)
        items.append(f"<li><code>{html.escape(claim_id)}</code> <b>{html.escape(str(c.get('verdict')))}</b>: "
                     f"{html.escape(findings.figure_text(c, at_verdict))}. {html.escape(str(c.get('reason') or ''))}"
                     "</li>")
    return (f'<details id="lesson-{lesson.id}"><summary><b>{html.escape(lesson.seed)}: {_markdown_inline(lesson.name)}'
            f"</b> ({html.escape(lesson.id)}): {_markdown_inline(lesson.measure)}</summary>\n"
            f"<p><i>{html.escape(lesson.words)}</i> Seed: {html.escape(lesson.seed_figure)}.</p>"
            f"<ul>{''.join(items)}</ul></details>")


def _appendix(run: Run, executed: list[tuple[Path, Path, Failure | None]], figures: Path,
              formats: str, keep_code: bool) -> nbformat.NotebookNode:
    """The plumbing, at the end: the notebooks run (with their status) and their parameters."""
    rows = []
    for i, (nb, _out, failure) in enumerate(executed):
        state = (f'<span style="color:#b00020">failed: {html.escape(str(failure))}</span>'
                 if failure else '<span style="color:#1b7f3b">ran</span>')
        rows.append(f'<li><a href="#nb-{i}"><code>{html.escape(nb.name)}</code></a> &mdash; {state}</li>')
    text = (
        '<a id="about-this-report"></a>\n\n# About this report\n\n'
        f"<p>Built {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} from run "
        f"<code>{html.escape(run.id)}</code>. Notebook parameters: "
        f"<code>run_dir={html.escape(str(run.path.resolve()))}</code>, "
        f"<code>figures_dir={html.escape(str(figures))}</code>, "
        f"<code>figure_formats={html.escape(formats)}</code>. Code cells are "
        f"{'shown' if keep_code else 'hidden (<code>python -m harness report --keep-code</code> shows them)'}."
        "</p>\n\n<ol start=\"0\" id=\"notebooks-run\">\n" + "\n".join(rows) + "\n</ol>")
    return nbformat.v4.new_markdown_cell(text)


def combine(run: Run, executed: list[tuple[Path, Path, Failure | None]], figures: Path, formats: str,
            keep_code: bool, report_dir: Path) -> nbformat.NotebookNode:
    """One notebook made of every executed notebook, each under its own anchored header."""
    combined = nbformat.v4.new_notebook()
    combined.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "Python 3",
                                       "language": "python"}
    combined.metadata["language_info"] = {"name": "python"}
    cells = [_preface(run, executed)]
    for i, (nb_path, out, failure) in enumerate(executed):
        cells.append(_section_header(nb_path.name, i, failure, out, report_dir))
        if not out.exists():
            continue
        nb = nbformat.read(out, as_version=4)
        for cell in nb.cells:
            cells.append(copy.deepcopy(cell))
    cells.append(_appendix(run, executed, figures, formats, keep_code))
    for j, cell in enumerate(cells):  # ids must be unique across the merged notebooks
        cell["id"] = f"c{j}"
    combined.cells = cells
    return combined


def export_html(nb: nbformat.NotebookNode, destination: Path, keep_code: bool = False) -> Path:
    """Write `nb` as one self-contained HTML file: images inline, no network scripts."""
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    exporter = HTMLExporter(template_name="lab", embed_images=True, exclude_input=not keep_code,
                            exclude_input_prompt=not keep_code, exclude_output_prompt=True,
                            exclude_anchor_links=True)
    exporter.register_preprocessor(
        TagRemovePreprocessor(remove_cell_tags=REMOVE_CELL_TAGS, remove_input_tags=REMOVE_INPUT_TAGS,
                              enabled=True), enabled=True)
    body, _ = exporter.from_notebook_node(
        _without_data_only_outputs(nb),
        resources={"metadata": {"name": "Async database access in Python: study report"}})
    # require.js and MathJax come from a CDN by default; the report uses neither, and it must open
    # offline, exactly as archived.
    body = _EXTERNAL_SCRIPT.sub("", body)
    body = with_alt_text(body, figure_descriptions(nb))
    body = with_palette_pngs(body)
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(destination.name + ".tmp")
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, destination)
    return destination


def figure_descriptions(nb: nbformat.NotebookNode) -> list[str]:
    """One text per image the HTML will show, in order, for its alt text: the image's own `alt`
    (output metadata, for a figure whose text depends on the data), else the heading and first
    sentence of the markdown cell before the image's cell (each figure's section says what it
    shows). Cells the export removes (`REMOVE_CELL_TAGS`) show no image and are skipped."""
    out, context, shown = [], "Figure", 0
    for cell in nb.cells:
        if REMOVE_CELL_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        if cell.cell_type == "markdown":
            text = "".join(cell.source) if isinstance(cell.source, list) else cell.source
            lines = [x.strip() for x in text.splitlines() if x.strip()]
            heading = next((x.lstrip("#").strip() for x in lines if x.startswith("#")), "")
            prose = " ".join(x for x in lines if not x.startswith(("#", "|", "<")))
            sentence = re.split(r"(?<=\.)\s", prose, maxsplit=1)[0] if prose else ""
            plain = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", f"{heading}. {sentence}")
            context, shown = (plain.strip(" .:") or context)[:300], 0
        elif cell.cell_type == "code":
            for o in cell.get("outputs", []):
                if any(k in (o.get("data") or {}) for k in IMAGE_TYPES):
                    shown += 1
                    own = (o.get("metadata") or {}).get("alt")   # display(fig, metadata={"alt": ...})
                    out.append(f"Figure: {own}" if own else
                               f"Figure: {context}" + (f" (figure {shown} of this section)" if shown > 1 else ""))
    return out


def with_alt_text(body: str, descriptions: list[str]) -> str:
    """`body` with each embedded image's alt attribute set from `figure_descriptions`, in order
    (nbconvert writes none, or "No description has been provided for this image"). When the counts
    differ (a template that shows images differently), the images keep nbconvert's markup rather
    than take another figure's text."""
    if len(_EMBEDDED_IMAGE.findall(body)) != len(descriptions):
        return body
    texts = iter(descriptions)

    def described(m: re.Match[str]) -> str:
        attributes = _ALT.sub("", m.group(1))
        return f'<img alt="{html.escape(next(texts), quote=True)}"{attributes}>'
    return _EMBEDDED_IMAGE.sub(described, body)


def palette_png(data: bytes) -> bytes:
    """`data`, a PNG, re-encoded with a palette of at most `PALETTE_COLOURS` colours (Pillow's median
    cut), composited onto white (the page's background) first, its resolution kept; `data` itself
    when that is not smaller, or when Pillow cannot read it."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.format != "PNG":
                return data
            dpi = im.info.get("dpi")
            rgba = im.convert("RGBA")
    except (OSError, ValueError, Image.DecompressionBombError):
        return data
    flat = Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB")
    out = io.BytesIO()
    flat.quantize(colors=PALETTE_COLOURS).save(out, format="PNG", optimize=True, **({"dpi": dpi} if dpi else {}))
    return out.getvalue() if out.tell() < len(data) else data


def with_palette_pngs(body: str) -> str:
    """`body` with every embedded `data:image/png;base64,...` re-encoded by `palette_png` (each only
    when that makes it smaller)."""
    def smaller(m: re.Match[str]) -> str:
        try:
            data = base64.b64decode(m.group(2), validate=False)
        except (binascii.Error, ValueError):
            return m.group(0)
        new = palette_png(data)
        return m.group(0) if new is data else m.group(1) + base64.b64encode(new).decode("ascii")
    return _EMBEDDED_PNG.sub(smaller, body)


def _without_data_only_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `nb` without the outputs that carry only vendor data (`application/vnd.*`, such as
    the tables `notebook.show()` keeps for the tests): HTML cannot show them, and nbconvert warns
    for each. The executed notebooks keep them."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", [])
                            if not (o.get("data") and all(k.startswith("application/vnd.") for k in o["data"]))]
    return nb


def build(run: Run, keep_code: bool = False, *, figures: str | Path | None = None,
          notebooks_dir: str | Path = NOTEBOOKS_DIR, formats: str = FIGURE_FORMATS) -> Path:
    """Execute every notebook on `run`, export `<run>/report/index.html`, return its path.

    Raises HarnessError after writing the report if any notebook failed.
    """
    from tqdm import tqdm

    figs = figures_dir(run, figures)
    report_dir = run.path / "report"
    executed_dir = report_dir / "notebooks"
    executed_dir.mkdir(parents=True, exist_ok=True)
    chosen = notebooks_for(run, notebooks_dir)
    failures_by_name: dict[str, Failure | None] = {}
    # Side by side, one kernel per core: the notebooks only read the run (figures.save_figure locks
    # the figures' manifest), and the report is built after every measurement, never during one.
    workers = max(1, min(REPORT_WORKERS, os.cpu_count() or 1))
    with tqdm(total=len(chosen), unit="notebook", desc="report", file=sys.stderr) as bar, _Kernels() as kernels:
        pool = ThreadPoolExecutor(max_workers=workers)
        try:   # from the first submit: a Ctrl-C at any moment reaches the except below
            futures = {pool.submit(execute, nb, executed_dir / nb.name, run, figs, formats, kernels): nb
                       for nb in chosen}
            pending = set(futures)
            while pending:
                # A timed wait: the main thread runs Python code at least twice a second, so it acts
                # on a Ctrl-C even when the signal reached one of the workers' threads.
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    nb, failure = futures[future], future.result()
                    failures_by_name[nb.name] = failure
                    bar.set_description(f"report {nb.stem}")
                    if failure:
                        bar.write(f"  FAILED {failure}")
                    bar.update(1)
        except BaseException:   # Ctrl-C, SIGTERM: no further notebook, and every kernel ends now
            pool.shutdown(wait=False, cancel_futures=True)
            kernels.stop()
            raise
        finally:
            pool.shutdown(wait=True)   # after stop(): the workers return as their kernels die
    executed = [(nb, executed_dir / nb.name, failures_by_name[nb.name]) for nb in chosen]
    index = export_html(combine(run, executed, figs, formats, keep_code, report_dir),
                        report_dir / "index.html", keep_code=keep_code)
    failures = [f for _, _, f in executed if f]
    if failures:
        raise HarnessError(f"{len(failures)} of {len(executed)} notebooks failed (the report at {index} "
                           "shows them):\n" + "\n".join(f"  - {f}" for f in failures))
    return index
