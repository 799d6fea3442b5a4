"""An open-loop, constant-arrival-rate HTTP load generator that does not hide stalls.

Why it exists. Locust (like wrk, ab, JMeter) is closed-loop: a user sends its next request only
after the previous response. When the server stalls, the users stall with it, the requests that
would have measured the stall are never sent, and the percentiles look better than the service
a client arriving at random would get ("coordinated omission", Gil Tene). An open-loop generator
fixes the *schedule* in advance: request i is due at ``t0 + i / rate`` whatever happened before.

Why it is written here. The established tool that measures from the intended send time, wrk2, is
not packaged for Debian or PyPI. Vegeta (Go, from the module proxy) is open-loop but records each
hit's actual start only, so the two figures below cannot both be had from it; k6's
constant-arrival-rate executor drops iterations it cannot start and likewise times from the actual
start. This module does the one thing needed, the way wrk2 does it.

The model (wrk2's). `connections` keep-alive HTTP/1.1 connections, no pipelining. The schedule is
shared: a free connection takes the next due request, waits until its intended time if it is
early, and sends it; if every connection is busy, the request waits (in the generator) for the
first one to free up. Per request it records
    intended_s   when it was due (schedule),                 seconds since t0
    actual_s     when its bytes were written,                seconds since t0
    end_s        when the response was complete (or failed), seconds since t0
    corrected_s  end_s - intended_s: what a client arriving on schedule experienced
    naive_s      end_s - actual_s:   what a wrk-style (closed-loop per connection) tool reports
When the server stalls for longer than the connections can absorb, requests pile up behind the
stall *in the generator*: their naive latency starts after the stall and looks fine, their
corrected latency includes the wait. With ample connections and no stall the two coincide.

Bounded in time: the schedule lasts `duration_s`; requests not yet sent `drain_s` after it ends are
recorded as unsent (``sent=False``) and in-flight ones then fail with a timeout. An unsent request is
not dropped: its corrected latency is from its intended send time to the end of the window
(``window_end_s``, a lower bound), so a generator that falls behind cannot improve its percentiles.

Validity (`assess`). The send lag (actual - intended) of every sent request is summarised; a rate
is `invalid` when the generator fell behind, i.e. its lag p99 exceeds half the inter-arrival time
(0.5 / rate), or when any request was never sent. An invalid rate's figures are kept as raw data
but are not latency figures of the server. Latencies go into HdrHistograms through `harness.core.stats`
(``stats.hdr_summary``); `ok` says which requests got HTTP 2xx.

    python -m harness.core.openloop http://127.0.0.1:8000/listings/top --rate 50 --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from . import stats
from .measure import error_text

LEAD_S = 0.05  # t0 is this far after start-up, so that request 0 is not late by construction


@dataclass
class OpenLoopResult:
    url: str
    rate: float                 # intended requests per second
    duration_s: float           # length of the schedule
    connections: int
    requests: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0         # t0 until the last request finished (or the drain ended)
    drain_s: float = 0.0

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.requests, columns=list(_ROW_KEYS))

    def histogram(self, kind: str):
        """HdrHistogram (integer microseconds) of `corrected` latency (every scheduled request,
        unsent ones up to the window's end) or `naive` latency (sent requests only)."""
        if kind not in ("corrected", "naive"):
            raise ValueError(f"kind must be corrected or naive, got {kind!r}")
        rows = self.requests if kind == "corrected" else [r for r in self.requests if r["sent"]]
        return stats.hdr_histogram(round(r[f"{kind}_s"] * 1e6) for r in rows)

    def summary(self) -> dict[str, Any]:
        sent = [r for r in self.requests if r["sent"]]
        return {
            "url": self.url, "rate": self.rate, "duration_s": self.duration_s,
            "connections": self.connections, "scheduled": len(self.requests), "sent": len(sent),
            "ok": sum(r["ok"] for r in sent), "unsent": len(self.requests) - len(sent),
            "corrected": stats.hdr_summary(self.histogram("corrected")),
            "naive": stats.hdr_summary(self.histogram("naive")),
            **{k: v for k, v in assess(self.frame(), self.rate, self.wall_s).items()
               if k.startswith("lag_") or k in ("invalid", "invalid_reason")},
        }


def assess(frame, rate: float, wall_s: float) -> dict[str, Any]:
    """One rate's figures from its rows (`OpenLoopResult.frame()` or the stored `openloop` table):
    counts, achieved rate, send-lag percentiles, corrected (all scheduled requests, unsent ones up
    to the window's end) and naive latency percentiles, and whether the rate is `invalid`."""
    import numpy as np

    sent = frame[frame["sent"]]
    lag_ms = (sent["actual_s"] - sent["intended_s"]).to_numpy(float) * 1000.0
    lag = dict(zip(("lag_p50_ms", "lag_p99_ms"), stats.percentiles(lag_ms, [50, 99])))
    lag["lag_max_ms"] = float(lag_ms.max()) if lag_ms.size else float("nan")
    unsent = int((~frame["sent"]).sum())
    half_gap_ms = 0.5 / rate * 1000.0
    reasons = []
    if unsent:
        reasons.append(f"{unsent} requests never sent")
    if lag["lag_p99_ms"] > half_gap_ms:
        reasons.append(f"send lag p99 {lag['lag_p99_ms']:.1f} ms > half the inter-arrival time "
                       f"({half_gap_ms:.1f} ms)")
    c_hist = stats.hdr_histogram(np.round(frame["corrected_s"].to_numpy(float) * 1e6))
    c = {**stats.hdr_summary(c_hist), "p95_ms": c_hist.get_value_at_percentile(95.0) / 1000.0}
    n = stats.hdr_summary(stats.hdr_histogram(np.round(sent["naive_s"].to_numpy(float) * 1e6)))
    ok = int(frame["ok"].sum())
    return {"scheduled": len(frame), "sent": len(sent), "ok": ok, "failed": len(sent) - ok, "unsent": unsent,
            "achieved_rps": ok / wall_s if wall_s > 0 else float("nan"),
            **{k: float(v) for k, v in lag.items()},
            **{f"corrected_{k}": c[k] for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")},
            **{f"naive_{k}": n[k] for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")},
            "invalid": bool(reasons), "invalid_reason": "; ".join(reasons)}


_ROW_KEYS = ("seq", "connection", "intended_s", "actual_s", "end_s", "corrected_s", "naive_s",
             "status", "ok", "sent", "error", "window_end_s")


class _Connection:
    """One keep-alive HTTP/1.1 connection; reconnects after an error or `Connection: close`."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, raw: bytes) -> int:
        reused = self.writer is not None
        try:
            return await self._exchange(raw)
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as e:
            # A server closes idle keep-alive connections (uvicorn after 5 s). A reused connection
            # that fails before any response byte is stale: retry the GET once on a fresh one, as
            # HTTP clients do. The retry stays inside the request's measured time.
            if not reused or (isinstance(e, asyncio.IncompleteReadError) and e.partial):
                raise
            self.close()
            return await self._exchange(raw)

    async def _exchange(self, raw: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(raw)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip().lower()
        if headers.get("transfer-encoding") == "chunked":
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        elif "content-length" in headers:
            await self.reader.readexactly(int(headers["content-length"]))
        else:  # body delimited by close
            await self.reader.read()
            headers["connection"] = "close"
        if headers.get("connection") == "close":
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def run_async(url: str, rate: float, duration_s: float, *, connections: int = 16,
                    timeout_s: float = 60.0, drain_s: float = 10.0) -> OpenLoopResult:
    """Send GET `url` at `rate` per second for `duration_s` over `connections` connections."""
    if rate <= 0 or duration_s <= 0 or connections < 1:
        raise ValueError("rate and duration_s must be positive and connections at least 1")
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http:// URLs are supported, got {url!r}")
    host: str = parts.hostname
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    raw = (f"GET {target} HTTP/1.1\r\nHost: {parts.hostname}:{port}\r\n"
           f"User-Agent: harness-openloop\r\nAccept: */*\r\n\r\n").encode("latin-1")
    n = max(1, round(rate * duration_s))
    result = OpenLoopResult(url, rate, duration_s, connections, drain_s=drain_s)
    rows: list[dict[str, Any] | None] = [None] * n
    t0 = time.perf_counter() + LEAD_S
    deadline = t0 + duration_s + drain_s   # nothing is sent, or waited for, past this
    next_seq = 0

    async def worker(cid: int) -> None:
        nonlocal next_seq
        conn = _Connection(host, port)
        try:
            while next_seq < n:
                i = next_seq
                next_seq += 1  # claimed in order: the earliest due request goes to the first free connection
                intended = t0 + i / rate
                delay = intended - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                actual = time.perf_counter()
                if actual >= deadline:
                    rows[i] = _row(i, cid, intended - t0, None, None, None, "not sent before the drain ended",
                                   deadline - t0)
                    continue
                status, error = None, None
                try:
                    async with asyncio.timeout(min(timeout_s, deadline - actual)):
                        status = await conn.request(raw)
                except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                        ValueError, IndexError) as e:
                    error = error_text(e, 200)
                    conn.close()
                end = time.perf_counter()
                rows[i] = _row(i, cid, intended - t0, actual - t0, end - t0, status, error, deadline - t0)
        finally:
            conn.close()

    await asyncio.gather(*(worker(c) for c in range(min(connections, n))))
    result.requests = [r for r in rows if r is not None]
    result.wall_s = time.perf_counter() - t0
    return result


def _row(seq, cid, intended, actual, end, status, error, window_end) -> dict[str, Any]:
    sent = actual is not None
    return {"seq": seq, "connection": cid, "intended_s": intended,
            "actual_s": actual if sent else float("nan"), "end_s": end if sent else float("nan"),
            # unsent: censored at the window's end (it waited at least that long), never dropped
            "corrected_s": (end if sent else window_end) - intended, "window_end_s": window_end,
            "naive_s": end - actual if sent else float("nan"),
            "status": status if status is not None else -1, "ok": bool(status is not None and 200 <= status < 300),
            "sent": sent, "error": error or ""}


def run(url: str, rate: float, duration_s: float, *, connections: int = 16, timeout_s: float = 60.0,
        drain_s: float = 10.0, loop: str = "asyncio") -> OpenLoopResult:
    """`run_async` in a new event loop (`loop="uvloop"` for uvloop's)."""
    coro = run_async(url, rate, duration_s, connections=connections, timeout_s=timeout_s, drain_s=drain_s)
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--duration", type=float, required=True, help="seconds of schedule")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--drain", type=float, default=10.0)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    a = ap.parse_args(argv)
    r = run(a.url, a.rate, a.duration, connections=a.connections, timeout_s=a.timeout, drain_s=a.drain,
            loop=a.loop)
    print(json.dumps(r.summary(), indent=2))


if __name__ == "__main__":
    main()
