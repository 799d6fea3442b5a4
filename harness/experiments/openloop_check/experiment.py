"""A check of the hand-written open-loop generator (harness.core.openloop) against Vegeta v12.13.0.

The question: does `harness/core/openloop.py` measure what an established open-loop tool measures, and
could that tool replace it? Vegeta (github.com/tsenart/vegeta, Go, `scripts/install-vegeta`) sends
hits at a constant rate whatever the server does. What its figures mean, from its source
(v12.13.0, lib/attack.go and lib/pacer.go):

- `timestamp` is taken when a worker goroutine picks a tick up from the pacer (`hit()`), i.e. the
  hit's *actual* start; `latency` runs from there to the end of the response body. Nothing records
  the hit's intended time. Hit h is due `(h + 1) / rate` after the attack began (ConstantPacer).
- `-max-workers N` bounds the workers: when all N wait for responses, the pacer blocks on the tick
  channel, then sends the overdue ticks at once ("running behind, send next hit immediately") and
  stops at `-duration`: hits it could not start by then are never sent. Time a request spent
  waiting for a worker is in no latency. Without it (the default) a new worker is started whenever
  all are busy, so every hit starts on schedule.
- `-max-connections N` bounds the connections instead (Go's http.Transport MaxConnsPerHost): a hit
  that finds them all busy waits inside `client.Do`, after its timestamp, so that wait *is* in its
  latency, as in harness.core.openloop's corrected latency.

So Vegeta runs in two ways beside the hand-written generator, all with `connections` at most in flight:
    openloop[load=F]                    harness.core.openloop, `connections` keep-alive connections
    vegeta[bound=workers,load=F]        -workers N -max-workers N (the usual way to bound Vegeta)
    vegeta[bound=connections,load=F]    -max-connections N, workers unbounded
(`rate=R` instead of `load=F` when fixed `rates` are given.)

Per repeat: one uvicorn process of the async app variant (`harness.experiments.fastapi.workload.Variant`,
`async def` endpoint, AsyncMongoClient, the default `page` query, FerretDB's GIN index as in
fastapi_locust), on fastapi_locust's network path by default (through Toxiproxy with 2 ms added per
database round trip; `--set via_proxy=off --set rtt_ms=0` for direct). Its capacity is measured
once (`capacity` table): harness.core.openloop offered `probe_rate` (far above capacity) for `probe_s`
with `connections` connections, i.e. closed loop at that concurrency; the capacity is the
successful responses completed after the first second divided by the time. Then at each of
`load_fractions` x capacity (two below saturation, one above; rounded to whole requests per second,
as Vegeta's `-rate N/1s` needs) each tool runs for `duration_s`, in an order reversed on odd rates
and on odd repeats, with `settle_s` of rest between windows.

Tables (one repeat):
    samples   one row per request (per Vegeta hit), both tools: variant, tool, bound, load, rate,
              seq, intended_s (openloop: its schedule; Vegeta: (seq + 1) / rate, reconstructed),
              start_s (actual send, since the tool's start), latency_s (from the actual send: the
              tool's own latency for Vegeta, `naive` for openloop), corrected_s (end - intended_s;
              openloop's unsent requests censored at its window's end), status, ok, sent,
              infrastructure (connection refused: the app is gone), error
    runs      one row per tool window: scheduled, sent, ok, wall_s, the Vegeta command line...
    capacity  the probe: offered rate, connections, ok responses, capacity_rps
    windows   ctx.window() per tool window (cpu_s is this worker's CPU, i.e. harness.core.openloop's own)
              with generator_cpu_s (openloop: the worker; Vegeta: its process, from rusage),
              server_cpu_s (uvicorn), db_cpu_s (FerretDB + PostgreSQL) and machine_cpu_s (all cores
              busy, whatever ran), and one for the probe
    failures  a tool window that crashed (Vegeta exit code, unreadable output)
Vegeta's own results (encoded to CSV, bodies not kept: `-max-body 0`) stay in the repeat's artifacts.

harness.experiments.openloop_check.analysis computes throughput, percentiles and failures per rate and tool and
says, per rate, whether the tools agree within stated tolerances and, where not, why.
This experiment is not part of `harness study` (`in_study = False`): run it by name.
"""

from __future__ import annotations

import math
import os
import resource
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ...core import datasets, openloop, processes
from ...core.config import REPO_ROOT
from ...core.errors import HarnessError
from ...core.measure import CPUSampler, error_text, machine_busy_s
from ...core.verdicts import AGREE
from ..base import OTHER_COLUMNS, Experiment, Metric, Params, variant_id, window_columns
from ..fastapi.workload import CLOUD_RTT_MS, QUERIES, Variant, index_key, request_path, search_index
from .analysis import QUANTILES, figures, verdicts

_ANY = {OTHER_COLUMNS: "any"}
VEGETA_MODULE = "github.com/tsenart/vegeta/v12"
VEGETA_VERSION = "v12.13.0"
BOUNDS = ("workers", "connections")
# Vegeta's CSV encoding (lib/results.go NewCSVEncoder), one hit per line
VEGETA_CSV = ("timestamp_ns", "code", "latency_ns", "bytes_out", "bytes_in", "error", "body", "attack", "seq",
              "method", "url", "headers")
# proxies from the environment must not sit between the generator and the app
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def vegeta_binary() -> Path:
    """`.tools/bin/vegeta` (scripts/install-vegeta), else `vegeta` on PATH; a HarnessError otherwise."""
    for c in (str(REPO_ROOT / ".tools/bin/vegeta"), shutil.which("vegeta")):
        if c and Path(c).exists() and os.access(c, os.X_OK):
            return Path(c)
    raise HarnessError("vegeta not found (neither .tools/bin/vegeta nor on PATH): run scripts/install-vegeta "
                       f"(builds {VEGETA_MODULE}@{VEGETA_VERSION} with Go)")


def vegeta_version(binary: Path) -> str:
    """The module version scripts/install-vegeta wrote beside the binary (a binary built from the
    module prints an empty version)."""
    recorded = binary.with_name(binary.name + ".version")
    return recorded.read_text().strip() if recorded.exists() else "unknown (not built by scripts/install-vegeta)"


@dataclass(frozen=True)
class OpenloopCheckParams(Params):
    via_proxy: bool = True                 # fastapi_locust's network path: through Toxiproxy...
    rtt_ms: float = CLOUD_RTT_MS           # ...with 2 ms added per database round trip
    documents: int = 5_555                 # sample_airbnb's listingsAndReviews size
    query: str = "page"                    # the app's query (harness.experiments.fastapi.workload.QUERIES)
    page: int = 0
    loop: str = "asyncio"                  # uvicorn --loop, and harness.core.openloop's loop
    load_fractions: tuple[float, ...] = (0.3, 0.6, 1.5)  # of the measured capacity: 2 below, 1 above
    rates: tuple[float, ...] = ()          # fixed rates (req/s): when set, no probe, used instead
    vegeta_bounds: tuple[str, ...] = BOUNDS
    duration_s: float = 30.0               # each tool's schedule at each rate
    connections: int = 16                  # fastapi_locust's open-loop connections; Vegeta's bound
    drain_s: float = 30.0                  # harness.core.openloop: sending may run this long past the schedule
    request_timeout_s: float = 60.0        # both tools (Vegeta -timeout)
    probe_s: float = 5.0
    probe_rate: float = 2000.0             # offered during the probe: far above capacity
    settle_s: float = 1.0                  # rest between windows
    health_timeout_s: float = 60.0
    cpu_sample_s: float = 1.0
    timeout_s: float = 1500.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "load_fractions", "rates", "duration_s", "connections",
                              "request_timeout_s", "probe_s", "probe_rate", "health_timeout_s", "cpu_sample_s")
        self.require_non_negative("page", "drain_s", "settle_s", "rtt_ms")
        self.require_choice("query", QUERIES)
        self.require_choice("loop", ("asyncio", "uvloop"))
        self.require_choice("vegeta_bounds", BOUNDS)
        if not self.vegeta_bounds:
            raise HarnessError("parameter vegeta_bounds must name at least one of workers, connections")
        if not self.rates and not self.load_fractions:
            raise HarnessError("parameter load_fractions (or rates) must name at least one load")
        if self.probe_s <= 1.0 and not self.rates:
            raise HarnessError(f"parameter probe_s must exceed 1 s (its first second is not counted), "
                               f"got {self.probe_s}")
        if self.rtt_ms and not self.via_proxy:
            raise HarnessError("parameter rtt_ms needs via_proxy=true")

    @property
    def path(self) -> str:
        # fastapi_locust's default request (a page of the companion collection holds PAGE_SIZE listings)
        return request_path(self.query, page=self.page, market="Porto", band=1, min_rating=95,
                            limit=datasets.PAGE_SIZE)

    @property
    def index_probe(self) -> str:
        return index_key(self.query, page=self.page, market="Porto", band=1)


def whole_rate(rate: float) -> int:
    """Rates are whole requests per second: Vegeta's `-rate N/1s` takes an integer."""
    return max(1, int(round(rate)))


# full and quick: the same window lengths (full repeats them)
SHORT_SIZES = {"duration_s": 10.0, "drain_s": 15.0, "probe_s": 4.0, "timeout_s": 600.0}


class OpenloopCheck(Experiment):
    name = "openloop_check"
    title = "The hand-written open-loop generator (harness.core.openloop) checked against Vegeta"
    needs = ("mongodb",)
    in_study = False                       # a check of the tooling, run by name: not in `harness study`
    params_type = OpenloopCheckParams
    analysis = "harness.experiments.openloop_check.analysis"
    family = "fastapi"
    ceiling = None
    drivers = ("fastapi", "starlette", "uvicorn", "anyio")
    notebook = ""
    failure_tolerance = 0.01               # above saturation a few time-outs are a figure, not a fault
    repeats = {"smoke": 1, "quick": 1, "full": 3, "seed": 3}
    headline = (Metric("throughput_rps", "req/s", ""), Metric("p50_ms", "ms", ""), Metric("p99_ms", "ms", ""),
                Metric("agrees", "flag", ""))
    tables = {
        "samples": {"variant": "str", "tool": "str", "bound": "str", "load": "float", "rate": "float",
                    "seq": "int", "intended_s": "float", "start_s": "float", "latency_s": "float",
                    "corrected_s": "float", "status": "int", "ok": "bool", "sent": "bool",
                    "infrastructure": "bool", "error": "str"},
        "runs": {"variant": "str", "tool": "str", "bound": "str", "load": "float", "rate": "float",
                 "duration_s": "float", "scheduled": "int", "sent": "int", "ok": "int", "status": "str", **_ANY},
        "capacity": {"variant": "str", "capacity_rps": "float", **_ANY},
        "failures": {"variant": "str", "error": "str"},
        "windows": window_columns(**_ANY),
    }
    profiles = {
        "seed": {},
        "full": SHORT_SIZES, "quick": SHORT_SIZES,
        "smoke": {"documents": 300, "duration_s": 1.0, "drain_s": 5.0, "probe_s": 1.5, "connections": 4,
                  "settle_s": 0.25, "warmup_s": 0.3, "health_timeout_s": 30.0, "cpu_sample_s": 0.5, "timeout_s": 300.0},
    }

    metrics = (Metric("throughput_rps", "req/s", ""), *(Metric(f"{q}_ms", "ms", "") for q in QUANTILES),
               *(Metric(f"naive_{q}_ms", "ms", "") for q in QUANTILES), Metric("failure_rate", "ratio", "lower"),
               Metric("sent_fraction", "ratio", ""), Metric("lag_p99_ms", "ms", "lower"),
               Metric("generator_cpu_ms_per_request", "ms", "lower"), Metric("agrees", "flag", ""),
               Metric("p99_over_openloop", "ratio", ""), Metric("throughput_over_openloop", "ratio", ""),
               Metric("capacity_rps", "req/s", ""))

    def compute_metrics(self, run, rows) -> None:
        """Per tool window throughput_rps, p50/p95/p99_ms (openloop: corrected), naive_p*_ms,
        failure_rate, sent_fraction, lag_p99_ms; per Vegeta window `agrees` (1 agree, 0 differ) and
        its p99 and throughput over openloop's; capacity_rps per repeat."""
        figs = figures(run)
        for _, r in figs.iterrows():
            v, k = r["variant"], int(r["repeat"])
            rows.put(v, "throughput_rps", k, r["throughput_rps"])
            for q in QUANTILES:
                rows.put(v, f"{q}_ms", k, r[f"{q}_ms"])
                rows.put(v, f"naive_{q}_ms", k, r[f"naive_{q}_ms"])
            rows.put(v, "failure_rate", k, r["failure_rate"])
            rows.put(v, "sent_fraction", k, r["sent_fraction"])
            rows.put(v, "lag_p99_ms", k, r["lag_p99_ms"])
            if "generator_cpu_s" in r and r["sent"]:
                rows.put(v, "generator_cpu_ms_per_request", k, r["generator_cpu_s"] / r["sent"] * 1000)
        for _, r in verdicts(figs).iterrows():
            v, k = r["vegeta"], int(r["repeat"])
            rows.put(v, "agrees", k, 1.0 if r["verdict"] == AGREE else 0.0)
            rows.put(v, "p99_over_openloop", k, r["vegeta_p99_ms"] / r["openloop_p99_ms"])
            rows.put(v, "throughput_over_openloop", k, r["vegeta_throughput_rps"] / r["openloop_throughput_rps"])
        for _, r in run.table(self.name, "capacity").iterrows():
            rows.put("", "capacity_rps", int(r["repeat"]), r["capacity_rps"])

    def datasets(self, p):
        return [datasets.Listings(p.documents)]

    def run(self, ctx) -> None:
        p: OpenloopCheckParams = ctx.params
        binary = vegeta_binary()
        ctx.note("vegeta", {"binary": str(binary), "module": VEGETA_MODULE, "version": vegeta_version(binary)})
        ctx.note("settings", {"query": p.query, "path": p.path, "via_proxy": p.via_proxy, "rtt_ms": p.rtt_ms,
                              "connections": p.connections, "duration_s": p.duration_s, "loop": p.loop,
                              "app_variant": "async"})
        app = Variant(ctx, p, "async")
        with search_index(ctx, p.query, p.index_probe):
            server = app.start_app("openloop_check")
            try:
                ctx.note("unloaded_latency_s", app.base.get("unloaded_latency_s"))
                levels = self._levels(ctx, p, app, server)
                ctx.note("levels", [{"load": load, "rate": rate} for load, rate in levels])
                for i, (load, rate) in enumerate(levels):
                    tools = ctx.order([("openloop", "connections"), *[("vegeta", b) for b in p.vegeta_bounds]])
                    for tool, bound in (tools[::-1] if i % 2 else tools):
                        if server.poll() is not None:
                            raise HarnessError(f"the app exited (code {server.poll()}): {server.log_tail(10)}")
                        time.sleep(p.settle_s)
                        ToolWindow(ctx, p, app, server, binary, tool, bound, load, rate).run()
            finally:
                server.stop()

    def _levels(self, ctx, p: OpenloopCheckParams, app: Variant, server) -> list[tuple[float, int]]:
        """(load fraction, rate) pairs: the fixed `rates` (fraction NaN), or fractions of a probe."""
        if p.rates:
            return [(float("nan"), whole_rate(r)) for r in dict.fromkeys(p.rates)]
        with ctx.window("capacity_probe", phase="probe", rate=p.probe_rate, connections=p.connections) as w:
            with CPUSampler({"server": [server.pid], "database": app.db_pids}, p.cpu_sample_s) as cpu:
                res = openloop.run(app.url + p.path, p.probe_rate, p.probe_s, connections=p.connections,
                                   timeout_s=p.request_timeout_s, drain_s=0.0, loop=p.loop)
            df = res.frame()
            w.ops = int(df["sent"].sum())
            w.fields.update(server_cpu_s=cpu.used("server"),
                            db_cpu_s=cpu.used("database"))
        # closed loop at `connections`: what completes after the first second is the capacity
        counted = df[df["ok"] & (df["end_s"] >= 1.0) & (df["end_s"] <= p.probe_s)]
        capacity = len(counted) / (p.probe_s - 1.0)
        ctx.record("capacity", [{"variant": "capacity_probe", "probe_rate": p.probe_rate, "probe_s": p.probe_s,
                                 "connections": p.connections, "sent": int(df["sent"].sum()),
                                 "ok": int(df["ok"].sum()), "counted": len(counted), "capacity_rps": capacity}])
        if capacity <= 0:
            raise HarnessError(f"capacity probe: no request succeeded in {p.probe_s:g} s "
                               f"(first error: {next((e for e in df['error'] if e), 'none')})")
        levels: dict[int, float] = {}
        for f in p.load_fractions:     # fractions that round to one rate run once
            levels.setdefault(whole_rate(f * capacity), f)
        return [(f, r) for r, f in levels.items()]


class ToolWindow:
    """One tool at one rate: its samples, its `runs` row and its window."""

    def __init__(self, ctx, p: OpenloopCheckParams, app: Variant, server, binary: Path, tool: str, bound: str,
                 load: float, rate: int):
        self.ctx, self.p, self.app, self.server, self.binary = ctx, p, app, server, binary
        self.tool, self.bound, self.load, self.rate = tool, bound, load, rate
        level = {"rate": float(rate)} if math.isnan(load) else {"load": load}
        self.variant = variant_id(tool, **level) if tool == "openloop" else variant_id(tool, bound=bound, **level)
        self.ids = {"variant": self.variant, "tool": tool, "bound": bound, "load": load, "rate": float(rate)}
        self.dir = ctx.artifacts / f"{tool}-{bound}-r{rate}"
        self.dir.mkdir(parents=True, exist_ok=True)

    def run(self) -> None:
        p, ctx = self.p, self.ctx
        row: dict[str, Any] = {**self.ids, "duration_s": p.duration_s, "connections": p.connections,
                               "scheduled": max(1, round(self.rate * p.duration_s)), "sent": 0, "ok": 0,
                               "status": "ok", "error": ""}
        fields = {k: v for k, v in self.ids.items() if k != "variant"}
        samples: pd.DataFrame | None = None
        with ctx.window(self.variant, phase="tool", **fields, connections=p.connections) as w:
            machine0 = machine_busy_s()
            with CPUSampler({"server": [self.server.pid], "database": self.app.db_pids}, p.cpu_sample_s) as cpu:
                try:
                    samples, extra = self._openloop() if self.tool == "openloop" else self._vegeta()
                except HarnessError as e:
                    extra = {"status": "failed", "error": str(e)}
            row.update(extra)
            # the whole machine's busy CPU: what else ran beside generator, app and database shows here
            w.fields.update(generator_cpu_s=row.get("generator_cpu_s", float("nan")),
                            server_cpu_s=cpu.used("server"),
                            db_cpu_s=cpu.used("database"),
                            machine_cpu_s=machine_busy_s() - machine0)
            if samples is not None and len(samples):
                row.update(sent=int(samples["sent"].sum()), ok=int(samples["ok"].sum()))
                w.ops = row["sent"]
        row["wall_s"] = w.wall_s
        if samples is not None and len(samples):
            ctx.record("samples", samples)
        ctx.record("runs", [row])
        if row["status"] != "ok":
            ctx.record("failures", [{"variant": self.variant, "error": row["error"]}])

    def _openloop(self) -> tuple[pd.DataFrame, dict[str, Any]]:
        p = self.p
        cpu0 = time.process_time()  # this worker's CPU over the run is the generator's
        res = openloop.run(self.app.url + p.path, self.rate, p.duration_s, connections=p.connections,
                           timeout_s=p.request_timeout_s, drain_s=p.drain_s, loop=p.loop)
        cpu_s = time.process_time() - cpu0
        df = res.frame()
        samples = pd.DataFrame({
            **{k: v for k, v in self.ids.items()},
            "seq": df["seq"].astype(int), "intended_s": df["intended_s"], "start_s": df["actual_s"],
            "latency_s": df["naive_s"], "corrected_s": df["corrected_s"], "status": df["status"].astype(int),
            "ok": df["ok"].astype(bool), "sent": df["sent"].astype(bool),
            "infrastructure": df["error"].str.contains("Connect call failed|refused", case=False, regex=True),
            "error": df["error"].astype(str)})
        return samples, {"generator_cpu_s": cpu_s, "run_wall_s": res.wall_s, "drain_s": p.drain_s,
                         "unsent": int((~df["sent"]).sum())}

    def _vegeta(self) -> tuple[pd.DataFrame, dict[str, Any]]:
        p = self.p
        targets, results, csv = self.dir / "targets.txt", self.dir / "results.bin", self.dir / "results.csv"
        targets.write_text(f"GET {self.app.url + p.path}\n")
        bound = (["-workers", str(p.connections), "-max-workers", str(p.connections)] if self.bound == "workers"
                 else ["-max-connections", str(p.connections)])
        argv = [str(self.binary), "attack", "-targets", str(targets), "-rate", f"{self.rate}/1s",
                "-duration", f"{p.duration_s:g}s", "-timeout", f"{p.request_timeout_s:g}s", "-max-body", "0",
                *bound, "-output", str(results)]
        env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = processes.start(f"vegeta:{self.variant}", argv, self.dir / "vegeta.log", env=env)
        code = proc.wait(p.duration_s + p.request_timeout_s + 30)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        extra: dict[str, Any] = {"command": " ".join(argv[1:]), "generator_cpu_s": cpu_s}
        if code is None:
            proc.stop()
            raise HarnessError(f"vegeta attack did not finish in time: {proc.log_tail(5)}")
        if code != 0:
            raise HarnessError(f"vegeta attack exited with code {code}: {proc.log_tail(5)}")
        enc = processes.start(f"vegeta-encode:{self.variant}", [str(self.binary), "encode", "-to", "csv",
                                                                "-output", str(csv), str(results)],
                              self.dir / "vegeta-encode.log", env=env)
        if enc.wait(120) != 0:
            enc.stop()
            raise HarnessError(f"vegeta encode failed: {enc.log_tail(5)}")
        results.unlink()  # the CSV holds every field of every hit (bodies were not kept: -max-body 0)
        return self._read_csv(csv), extra

    def _read_csv(self, path: Path) -> pd.DataFrame:
        try:
            raw = pd.read_csv(path, header=None, names=list(VEGETA_CSV), keep_default_na=False,
                              dtype={"error": str, "body": str, "attack": str, "headers": str})
        except pd.errors.EmptyDataError:
            raw = pd.DataFrame(columns=list(VEGETA_CSV))
        except (ValueError, pd.errors.ParserError) as e:
            raise HarnessError(f"vegeta's CSV {path.name} is unreadable: {error_text(e, 200)}") from None
        if raw.empty:
            raise HarnessError("vegeta recorded no hit")
        ts = raw["timestamp_ns"].astype("int64")
        seq = raw["seq"].astype("int64")
        # Hit h is due (h + 1) / rate after the attack began (ConstantPacer); the attack's start is
        # not in the output, so it is reconstructed from the first hit, assumed on time.
        first = int(seq.idxmin())
        began_ns = int(ts[first]) - (int(seq[first]) + 1) * 1e9 / self.rate
        start_s = (ts - began_ns) / 1e9
        latency_s = raw["latency_ns"].astype("int64") / 1e9
        intended_s = (seq + 1) / self.rate
        code = raw["code"].astype(int)
        error = raw["error"].astype(str)
        return pd.DataFrame({
            **{k: v for k, v in self.ids.items()},
            "seq": seq, "intended_s": intended_s, "start_s": start_s, "latency_s": latency_s,
            "corrected_s": start_s + latency_s - intended_s, "status": code,
            "ok": (code >= 200) & (code < 300) & (error == ""), "sent": True,
            "infrastructure": error.str.contains("connection refused", case=False, regex=False),
            "error": error}).sort_values("seq", ignore_index=True)


EXPERIMENT = OpenloopCheck()
