"""Event-loop stalls while iterating a large cursor (seed 001, section 3).

A probe task (`harness.probe.LoopProbe`) sleeps 1 ms in a loop and records how late each wake-up
is, while the main task reads every document of `orders` with `async for` -- default batching, then
`batch_size` in `batch_sizes` -- and with `to_list()`. The longest lateness is the longest stall
the cursor caused; the iteration's own time is recorded too. Before the variants, the probe runs
alone for `probe_idle_s` to measure its floor and CPU cost.

Variants: `iterate[batch_size=default]`, `iterate[batch_size=N]`, `to_list[batch_size=default]`.
Tables:
- `samples`: one row per variant: variant, method, batch_size (0 = server default), task (0),
  start_s, latency_s (iteration time), ok, error, documents (read).
- `probe`: one row per probe wake-up: variant (`idle` for the calibration), seq, offset_s
  (when the wake-up was due, from the window's start), lateness_s.
- `windows`: one row per variant (wall and process CPU of the iteration, ops = documents).
Notes: `probe_idle` (the probe's CPU cost while idle), `ferretdb_backend_index` is not used here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import datasets
from ..mongo_workload import DOCUMENTS, async_client, orders, run_async
from ..probe import LoopProbe, measure_resolution
from .base import Experiment, Params, variant_id


@dataclass(frozen=True)
class CursorParams(Params):
    documents: int = DOCUMENTS["full"]             # size of `orders`, all read by every variant
    batch_sizes: tuple[int, ...] = (100, 1000, 10000)
    default_batching: bool = True                 # also iterate with the driver/server default
    to_list: bool = True                          # also read everything with to_list()
    probe_interval_s: float = 0.001
    probe_idle_s: float = 1.0                     # the probe alone, before the variants
    loop: str = "asyncio"
    driver: str = "pymongo"
    timeout_s: float = 420.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "batch_sizes", "probe_interval_s")
        self.require_non_negative("probe_idle_s")
        self.require_choice("loop", ("asyncio", "uvloop"))
        self.require_choice("driver", ("pymongo", "motor"))


class CursorStall(Experiment):
    name = "mongo_cursor"
    title = "Event-loop stalls while iterating a 100,000-document cursor"
    needs = ("mongodb",)
    params_type = CursorParams
    profiles = {"full": {},
                "quick": {"documents": DOCUMENTS["quick"], "probe_idle_s": 0.5, "warmup_s": 0.5},
                "smoke": {"documents": DOCUMENTS["smoke"], "batch_sizes": (100, 1000),
                          "probe_idle_s": 0.2, "warmup_s": 0.1}}

    def datasets(self, p: CursorParams) -> list:
        return [datasets.Orders(p.documents)]

    def run(self, ctx) -> None:
        p: CursorParams = ctx.params
        plan = ([("iterate", 0)] if p.default_batching else []) + [("iterate", b) for b in p.batch_sizes] \
            + ([("to_list", 0)] if p.to_list else [])
        run_async(lambda: self._main(ctx, plan), loop=p.loop)

    async def _main(self, ctx, plan: list[tuple[str, int]]) -> None:
        p: CursorParams = ctx.params
        idle = await measure_resolution(p.probe_idle_s, interval_s=p.probe_interval_s) \
            if p.probe_idle_s > 0 else None
        if idle:
            ctx.record("probe", [{"variant": "idle", "seq": i, "offset_s": o, "lateness_s": late}
                                 for i, (o, late) in enumerate(idle["samples"])])
            ctx.note("probe_idle", {k: v for k, v in idle.items() if k != "samples"})
        async with async_client(ctx.servers.mongodb_uri, driver=p.driver) as client:
            col = orders(client)
            await self._warm_up(col, p.warmup_s)
            for method, batch in plan:
                variant = variant_id(method, batch_size=batch or "default")
                kwargs = {"batch_size": batch} if batch else {}
                n, error = 0, None
                with ctx.window(variant, method=method, batch_size=batch, loop=p.loop, driver=p.driver) as w:
                    async with LoopProbe(interval_s=p.probe_interval_s, t0=w.t0) as probe:
                        try:
                            if method == "to_list":
                                n = len(await col.find({}, **kwargs).to_list())
                            else:
                                async for _doc in col.find({}, **kwargs):
                                    n += 1
                        except Exception as e:  # an unsupported option is a result, not a crash
                            error = f"{type(e).__name__}: {e}"[:300]
                    w.ops = n
                ctx.record("samples", [{"variant": variant, "method": method, "batch_size": batch, "task": 0,
                                        "start_s": 0.0, "latency_s": w.wall_s, "ok": error is None,
                                        "error": error, "documents": n}])
                ctx.record("probe", probe.rows(variant=variant))

    @staticmethod
    async def _warm_up(col, seconds: float) -> None:
        """Read documents for `seconds` (connection, server caches), then drop the cursor."""
        import time

        stop = time.perf_counter() + seconds
        cursor = col.find({}, batch_size=1000)
        async for _doc in cursor:
            if time.perf_counter() >= stop:
                break
        await cursor.close()


EXPERIMENT = CursorStall()
