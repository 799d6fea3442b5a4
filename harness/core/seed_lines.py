"""The seeds' own sentences that the harness quotes: each "Verify:" line of seeds 001 and 002,
seed 002's decision rule (its "5. Decide"), and, since seed 000 has no Verify line, the two
sentences of seed 000 that its lessons rest on. Each is the seed's text exactly, "..." only where
words are left out. Typed once, here; the findings table
(`harness.judging.findings.LESSONS`) and verify's checks (`harness.experiments.verify.analysis.LINES`)
quote them by key.
"""

from __future__ import annotations

LINES: dict[str, str] = {
    "000-sync-async": "This proves that Async manages high-concurrency significantly better, even when the "
                      "individual database query is complex.",
    "000-mixed": "an API written with FastAPI but using synchronous PyMongo can perform worse under load than a "
                 "fully synchronous application with multiple worker threads",
    "001-cursor": "Verify: every cursor that can return more than a few thousand documents sets batch_size, and "
                  "a probe shows loop stalls below 10 ms while it runs.",
    "001-pool": "Verify: under a load test with more tasks than connections, the maximum latency is within a "
                "small multiple of the p99, and per-task completion counts are even.",
    "001-client": "Verify: exactly one AsyncMongoClient is constructed per process, and close() is awaited at "
                  "shutdown.",
    "001-bulk": "Verify: loaders use insert_many or bulk_write, and the choice of ordered matches what should "
                "happen after the first error.",
    "001-models": "Verify: the migration's benefit is measured on the real query mix — CPU per query and tail "
                  "latency — not assumed.",
    "002-cpu": "Verify: the benchmark records client CPU time alongside throughput; without it, the results "
               "cannot say which side is the bottleneck.",
    "002-pool": "Verify: throughput is close to pool_size / per-request database time; if so, change the pool "
                "size or the queries, not the concurrency model.",
    "002-client": "Verify: if client CPU is at 100% for asyncio or 200% for threads on a GIL build, the client "
                  "is the bottleneck, and more connections will not raise throughput.",
    "002-tail": "Verify: the benchmark reports p99 and the p99/p50 ratio for each driver and pool, and the "
                "chosen configuration meets the latency objective.",
    "002-limit": "Verify: the decision names which resource limited throughput in the benchmark — pool or client "
                 "CPU — and the production pool size matches the tested one.",
    # the seed's "5. Decide" paragraph, its two rules
    "002-decide": "If the database is the bottleneck ... threads and asyncio deliver the same throughput, and "
                  "the existing codebase should decide ... If the client is the bottleneck ... asyncio did the "
                  "same work with a quarter of the CPU, and asyncpg on uvloop with a ninth.",
}
