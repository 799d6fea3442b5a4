"""Bulk writes against one insert per round trip (seed 001, section 2).

Everything is written to a scratch collection (`study.orders_bulk_scratch`), dropped before each
variant and at the end; `orders` is never touched. Documents are the `orders` documents (about
200 bytes), generated before any timing.
- `insert_one`: `insert_one_count` documents, one await each (per-document cost; the seed's
  100,000-document figure is this mean times `documents`, an extrapolation as in the seed).
- `insert_many`: `documents` documents in one call, `ordered=True` and `ordered=False`.
- `bulk_write_upsert`: `upserts` `UpdateOne(..., upsert=True)` in one `bulk_write(ordered=False)`
  over the unordered load: once with every `_id` new (`matching=0%`), and once with a fraction
  `upsert_matching` of them matching existing documents.
  FerretDB 1.24 does not return a PostgreSQL connection to its pool after an upsert that matches an
  existing document; after about 50 such updates (its pool size) every later command hangs, and the
  server must be restarted. On FerretDB the matching variant is therefore marked skipped
  (`ctx.skip`, with the reason; no row) unless `ferretdb_matching_upserts=on`.
  On FerretDB 1.24 `_id` lookups are sequential scans of the backing table, so each upsert costs
  a scan of the collection: that, not the client, dominates its figure there.
- duplicate key: a batch of `dup_batch` documents whose document at index `dup_index` repeats
  the `_id` of document 0, inserted with `ordered=True` and `ordered=False`; how many landed.
  (MongoDB stops an ordered batch at the failure: `dup_index` land. FerretDB 1.24 inserts in chunks
  of 100 and was seen to store the rest of the failing chunk too: the table records what happened.)

Tables (schemas in `tables` below):
- `samples`: one row per call (insert_one: per document); docs = documents in the call; the
  n_* counts as the server reported them (None where the call has none); matching (upserts only).
- `duplicates`: ordered, batch_docs, dup_index, landed (documents in the collection afterwards),
  n_inserted (as the server reported it), write_errors, error_code, first_error_index, error.
- `windows`: one row per variant.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

from ...core.datasets import SEED, order_document
from ...core.measure import error_text
from ...core.servers import STUDY_DB
from ..base import Experiment, Metric, Params, grid, variant_id, window_columns
from .analysis import bulk_duplicates, bulk_summary
from .workload import async_client, is_ferretdb, note_timeouts, run_async

SCRATCH = "orders_bulk_scratch"
SAMPLES = {"variant": "str", "op": "str", "ordered": "bool", "docs": "int", "task": "int", "start_s": "float",
           "latency_s": "float", "ok": "bool", "error": "str", "n_inserted": "int", "n_matched": "int",
           "n_modified": "int", "n_upserted": "int", "matching": "str"}


def _complete(rows: list[dict]) -> list[dict]:
    """Every `samples` column in every row (None where a call has no such count)."""
    return [{**dict.fromkeys(SAMPLES), **r} for r in rows]


@dataclass(frozen=True)
class BulkParams(Params):
    documents: int = 100_000        # insert_many size; insert_one's figure is extrapolated to it
    insert_one_count: int = 2_000   # insert_one calls measured
    # The seed gives no bulk_write figure; 1,000 keeps FerretDB (an unindexed _id lookup per upsert,
    # about 13 ms each over 20,000 documents) inside the time budget.
    upserts: int = 1_000
    dup_batch: int = 1_000
    dup_index: int = 500
    upsert_matching: float = 0.5    # fraction of upserts whose _id exists (second upsert variant)
    op_timeout_s: float = 120.0     # client-side timeoutMS: a hung server fails the call, not the run
    ferretdb_matching_upserts: bool = False  # run it on FerretDB anyway (wedges the server: see above)
    timeout_s: float = 300.0

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "insert_one_count", "upserts", "dup_batch", "dup_index", "op_timeout_s")
        if self.dup_index >= self.dup_batch:
            from ...core.errors import HarnessError
            raise HarnessError(f"parameter dup_index must be below dup_batch ({self.dup_batch}), "
                               f"got {self.dup_index}")


# full and quick: the same sizes (full repeats them)
SHORT_SIZES = {"documents": 20_000, "insert_one_count": 500, "upserts": 500, "warmup_s": 0.5}


class BulkWrites(Experiment):
    name = "mongo_bulk"
    title = "insert_one in a loop, insert_many, bulk_write upserts, and a duplicate key"
    needs = ("mongodb",)
    writes = True   # inserts and drops: the study checkpoints and vacuums after it
    params_type = BulkParams
    profiles = {"seed": {},
                "full": SHORT_SIZES, "quick": SHORT_SIZES,
                "smoke": {"documents": 1_000, "insert_one_count": 50, "upserts": 100, "dup_batch": 20,
                          "dup_index": 10, "warmup_s": 0.1}}
    # full: 6, set by power (docs/POWER.md: 001-bulk-01 needs 6 repeats for its interval to be half
    # its distance to the band's edge, from the committed runs' spread)
    repeats = {"smoke": 1, "quick": 1, "full": 6, "seed": 10}
    analysis = "harness.experiments.mongo.analysis"
    family = "mongo"
    ceiling = "python_cpu"
    drivers = ("pymongo", "motor")
    notebook = "02_mongo_client_bulk_models.ipynb"
    headline = (Metric("insert_one_us_per_doc", "us", "lower"), Metric("insert_many_s", "s", "lower"),
                Metric("insert_many_unordered_s", "s", "lower"))
    tables = {"samples": SAMPLES,
              "duplicates": {"ordered": "bool", "batch_docs": "int", "dup_index": "int", "landed": "int",
                             "n_inserted": "int", "write_errors": "int", "error_code": "int",
                             "first_error_index": "int", "error": "str"},
              "windows": window_columns(op="str", ordered="bool", docs="int", matching="str")}

    metrics = (*(Metric(f"{op}_us_per_doc", "us", "lower") for op in
                 ("insert_one", "insert_many", "insert_many_unordered", "bulk_write_upsert")),
               *(Metric(f"{op}_s", "s", "lower") for op in
                 ("insert_one_extrapolated", "insert_many", "insert_many_unordered", "bulk_write_upsert",
                  "bulk_write_upsert_matching")),
               *(Metric(n, "count", "") for n in ("insert_one_count", "documents", "dup_ordered_landed",
                                                 "dup_unordered_landed", "dup_batch_docs", "dup_index")))

    def compute_metrics(self, run, rows) -> None:
        params = run.experiments.get(self.name, {}).get("params", {})
        for _, r in bulk_summary(run).iterrows():
            if not r.ok:
                continue
            rep = r["repeat"]
            if r.op == "insert_one":
                rows.put("", "insert_one_us_per_doc", rep, r.us_per_doc)
                rows.put("", "insert_one_count", rep, r.documents)
                if params.get("documents"):
                    rows.put("", "insert_one_extrapolated_s", rep, r.us_per_doc * params["documents"] / 1e6)
            elif r.op == "insert_many":
                kind = "insert_many" if r.ordered else "insert_many_unordered"
                rows.put("", f"{kind}_s", rep, r.total_s)
                rows.put("", "documents", rep, r.documents)
                if r.documents:
                    rows.put("", f"{kind}_us_per_doc", rep, r.total_s / r.documents * 1e6)
            elif r.op == "bulk_write_upsert":
                if r.matching in (None, "0%"):
                    rows.put("", "bulk_write_upsert_s", rep, r.total_s)
                    rows.put("", "bulk_write_upsert_us_per_doc", rep, r.us_per_doc)
                else:
                    rows.put("", "bulk_write_upsert_matching_s", rep, r.total_s)
        for _, r in bulk_duplicates(run).iterrows():
            rep = r["repeat"]
            rows.put("", f"dup_{'ordered' if r.ordered else 'unordered'}_landed", rep, r.landed)
            rows.put("", "dup_batch_docs", rep, r.batch_docs)
            rows.put("", "dup_index", rep, r.dup_index)

    def run(self, ctx) -> None:
        run_async(lambda: self._main(ctx))

    async def _main(self, ctx) -> None:
        p: BulkParams = ctx.params
        rng = random.Random(f"{SEED}:bulk")
        docs = [order_document(i, rng) for i in range(max(p.documents, p.insert_one_count, p.dup_batch))]
        note_timeouts(ctx, timeoutMS=round(p.op_timeout_s * 1000))
        async with async_client(ctx.servers.mongodb_uri, timeoutMS=round(p.op_timeout_s * 1000)) as client:
            col = client[STUDY_DB][SCRATCH]
            try:
                await col.drop()
                await self._warm_up(col, docs, p.warmup_s)
                await self._insert_one(ctx, col, docs[:p.insert_one_count])
                # both orders store the same _ids, so the upserts below meet the same collection
                for pt in ctx.order(grid(ordered=(True, False))):
                    await col.drop()
                    await self._call(ctx, "insert_many", pt["ordered"], p.documents,
                                     lambda ordered=pt["ordered"]: col.insert_many(docs[:p.documents], ordered=ordered))
                await self._upserts(ctx, col, p, matching=0.0)
                if p.upsert_matching > 0:
                    if is_ferretdb(ctx.servers.mongodb_uri) and not p.ferretdb_matching_upserts:
                        self._skip(ctx, "bulk_write_upsert", p.upserts, p.upsert_matching,
                                   "skipped on FerretDB: upserts matching existing documents leak FerretDB's "
                                   "PostgreSQL connections and hang the server after ~50 (see module docstring); "
                                   "set ferretdb_matching_upserts=on to measure it anyway")
                    else:
                        await self._upserts(ctx, col, p, matching=p.upsert_matching)
                for pt in ctx.order(grid(ordered=(True, False))):
                    await col.drop()
                    await self._duplicates(ctx, col, docs[:p.dup_batch], p.dup_index, pt["ordered"])
            finally:
                await col.drop()

    async def _upserts(self, ctx, col, p: BulkParams, matching: float) -> None:
        from pymongo import UpdateOne

        # The unordered load holds _ids 0..documents-1: start below its end to match existing ones.
        lo = p.documents - round(p.upserts * matching)
        ops = [UpdateOne({"_id": i}, {"$set": {"total": float(i % 997)}}, upsert=True)
               for i in range(lo, lo + p.upserts)]
        await self._call(ctx, "bulk_write_upsert", False, p.upserts,
                         lambda: col.bulk_write(ops, ordered=False), matching=f"{matching:.0%}")

    @staticmethod
    def _skip(ctx, op: str, n: int, matching: float, reason: str) -> None:
        variant = variant_id(op, docs=n, ordered=False, matching=f"{matching:.0%}")
        ctx.skip(variant, reason)

    @staticmethod
    async def _warm_up(col, docs, seconds: float) -> None:
        stop, i = time.perf_counter() + seconds, 0
        while time.perf_counter() < stop:
            await col.insert_one(dict(docs[i % len(docs)], _id=f"warm-{i}"))
            i += 1
        await col.drop()

    async def _insert_one(self, ctx, col, docs) -> None:
        variant = variant_id("insert_one", docs=len(docs))
        perf, rows = time.perf_counter, []
        with ctx.window(variant, op="insert_one", ordered=True, docs=len(docs), matching=None) as w:
            for d in docs:
                start, error = perf(), None
                try:
                    await col.insert_one(d)
                except Exception as e:
                    error = error_text(e)
                rows.append({"variant": variant, "op": "insert_one", "ordered": True, "docs": 1, "task": 0,
                             "start_s": start - w.t0, "latency_s": perf() - start, "ok": error is None,
                             "error": error, "n_inserted": int(error is None)})
            w.ops = sum(r["ok"] for r in rows)
        ctx.record("samples", _complete(rows))

    async def _call(self, ctx, op: str, ordered: bool, n: int, call, **fields) -> None:
        variant = variant_id(op, docs=n, ordered=ordered, **fields)
        error, counts = None, {}
        with ctx.window(variant, op=op, ordered=ordered, docs=n, **{"matching": None, **fields}) as w:
            try:
                result = await call()
                counts = ({"n_inserted": len(result.inserted_ids)} if op == "insert_many" else
                          {"n_matched": result.matched_count, "n_modified": result.modified_count,
                           "n_upserted": result.upserted_count})
            except Exception as e:  # recorded as a failed variant, with the server's error
                error = error_text(e)
            w.ops = n if error is None else 0
        ctx.record("samples", _complete([{"variant": variant, "op": op, "ordered": ordered, "docs": n, "task": 0,
                                          "start_s": 0.0, "latency_s": w.wall_s, "ok": error is None,
                                          "error": error, **fields, **counts}]))

    @staticmethod
    async def _duplicates(ctx, col, docs, dup_index: int, ordered: bool) -> None:
        from pymongo.errors import BulkWriteError

        batch = [dict(d) for d in docs]
        batch[dup_index]["_id"] = batch[0]["_id"]
        row: dict[str, Any] = {"ordered": ordered, "batch_docs": len(batch), "dup_index": dup_index, "n_inserted": None,
               "write_errors": 0, "error_code": None, "first_error_index": None, "error": None}
        try:
            result = await col.insert_many(batch, ordered=ordered)
            row["n_inserted"] = len(result.inserted_ids)
        except BulkWriteError as e:
            errors = e.details.get("writeErrors", [])
            row.update(n_inserted=e.details.get("nInserted"), write_errors=len(errors),
                       error_code=errors[0].get("code") if errors else None,
                       first_error_index=errors[0].get("index") if errors else None,
                       error=(errors[0].get("errmsg") or str(e))[:300] if errors else str(e)[:300])
        except Exception as e:
            row["error"] = error_text(e)
        row["landed"] = await col.count_documents({})
        ctx.record("duplicates", [row])


EXPERIMENT = BulkWrites()
