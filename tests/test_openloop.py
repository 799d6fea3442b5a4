"""The open-loop generator's correction, on a server that stalls on purpose.

The server (its own process) answers at once, except that its event loop is blocked for PAUSE_S
once every PERIOD_S. Over one connection at RATE per second, a closed-loop view sees only the one
request caught in each stall (fewer than 1% of them: its p99 hides the stall), while the requests
that fell due during the stall waited behind it: measured from their intended send time, more
than 1% of them carry a large part of the stall, so the corrected p99 shows it.
"""

from __future__ import annotations

import sys
import urllib.request

import numpy as np
import pytest

from harness.core import openloop, processes, stats

PAUSE_S = 0.5
PERIOD_S = 2.0
RATE = 200.0
DURATION_S = 6.0

STALL_SERVER = r"""
import asyncio, sys, time

PAUSE_S, PERIOD_S = float(sys.argv[2]), float(sys.argv[3])

async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()

async def stall():
    while True:
        await asyncio.sleep(PERIOD_S - PAUSE_S)
        time.sleep(PAUSE_S)  # blocks the whole event loop, on purpose

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    asyncio.get_running_loop().create_task(stall())
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


@pytest.fixture
def stall_server(tmp_path):
    port = processes.free_port()
    proc = processes.start("stall-server", [sys.executable, "-c", STALL_SERVER, str(port), str(PAUSE_S),
                                            str(PERIOD_S)], tmp_path / "stall.log")
    try:
        assert processes.wait_for_port(port, 10, proc), proc.log_tail()
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.stop()


def test_corrected_latency_shows_the_stall_naive_hides_it(stall_server):
    result = openloop.run(stall_server, RATE, DURATION_S, connections=1, drain_s=5)
    df = result.frame()
    assert len(df) == round(RATE * DURATION_S)
    assert df["sent"].all() and df["ok"].all(), df[~df["ok"]].head()
    assert (df["actual_s"] >= df["intended_s"] - 1e-3).all()
    assert np.allclose(df["corrected_s"], df["end_s"] - df["intended_s"])
    assert np.allclose(df["naive_s"], df["end_s"] - df["actual_s"])

    s = result.summary()
    # The stall happened and was seen by at least one request in both views...
    assert s["naive"]["max_ms"] >= 0.8 * PAUSE_S * 1000
    # ...but only the corrected view carries it into the p99.
    assert s["corrected"]["p99_ms"] >= 0.5 * PAUSE_S * 1000, s
    assert s["naive"]["p99_ms"] < 0.5 * PAUSE_S * 1000, s
    assert s["corrected"]["p99_ms"] > 2 * s["naive"]["p99_ms"], s


def test_ample_connections_make_the_two_views_agree(stall_server):
    # With more connections than requests due during a stall, every request is sent on time and
    # waits at the server: naive and corrected differ only by the generator's own scheduling lag.
    result = openloop.run(stall_server, 20.0, 4.0, connections=32, drain_s=5)
    df = result.frame()
    assert df["ok"].all()
    lag = (df["actual_s"] - df["intended_s"]).to_numpy()
    assert stats.percentiles(lag, [50])[0] < 0.05
    assert result.summary()["naive"]["max_ms"] >= 0.5 * PAUSE_S * 1000


def test_unsent_requests_are_recorded_not_dropped(tmp_path):
    # Nothing listens on this port: every request fails fast, and each is still one row.
    port = processes.free_port()
    result = openloop.run(f"http://127.0.0.1:{port}/", 50.0, 0.5, connections=2, drain_s=1)
    df = result.frame()
    assert len(df) == 25
    assert not df["ok"].any()
    assert (df.loc[df["sent"], "error"] != "").all()


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        openloop.run("https://example.invalid/", 1.0, 1.0)
    with pytest.raises(ValueError):
        openloop.run("http://127.0.0.1:1/", 0.0, 1.0)


def test_urllib_sanity(stall_server):
    # The stall server speaks enough HTTP for an ordinary client (guards the fixture itself).
    with urllib.request.urlopen(stall_server, timeout=5) as r:
        assert r.read() == b"ok"


async def _closes_idle_connections(reader, writer):
    """Answers one request per connection, then closes it without saying so (an idle timeout)."""
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
    finally:
        writer.close()


def test_connections_closed_by_the_server_while_idle_are_reopened():
    """uvicorn closes keep-alive connections idle for 5 s; at low rates every connection idles that
    long. A request on such a stale connection is retried once on a fresh one, not counted failed."""
    import asyncio

    async def scenario():
        server = await asyncio.start_server(_closes_idle_connections, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await openloop.run_async(f"http://127.0.0.1:{port}/", rate=20.0, duration_s=1.0,
                                            connections=2, timeout_s=5.0, drain_s=2.0)

    result = asyncio.run(scenario())
    frame = result.frame()
    assert len(frame) == 20
    assert frame["ok"].all(), frame.loc[~frame["ok"], "error"].tolist()


def _frame(lags_s, rate, sent=None):
    import pandas as pd

    n = len(lags_s)
    intended = np.arange(n) / rate
    sent = np.ones(n, bool) if sent is None else np.asarray(sent)
    actual = np.where(sent, intended + np.asarray(lags_s), np.nan)
    end = actual + 0.001
    window_end = n / rate + 1.0
    return pd.DataFrame({"intended_s": intended, "actual_s": actual, "end_s": end, "sent": sent,
                         "corrected_s": np.where(sent, end, window_end) - intended,
                         "naive_s": end - actual, "ok": sent, "window_end_s": window_end})


@pytest.mark.parametrize("lag_fraction,invalid", [(0.4, False), (0.6, True)])
def test_a_rate_is_invalid_when_the_send_lag_p99_passes_half_the_gap(lag_fraction, invalid):
    rate = 100.0
    lags = np.full(200, lag_fraction / rate)  # every request late by this fraction of the gap
    a = openloop.assess(_frame(lags, rate), rate, 2.0)
    assert a["invalid"] is invalid, a
    assert a["lag_p99_ms"] == pytest.approx(lag_fraction / rate * 1000)


def test_one_unsent_request_makes_a_rate_invalid_and_counts_until_the_window_ends():
    rate = 10.0
    sent = np.ones(20, bool)
    sent[-1] = False
    f = _frame(np.zeros(20), rate, sent)
    a = openloop.assess(f, rate, 3.0)
    assert a["invalid"] and a["unsent"] == 1 and "never sent" in a["invalid_reason"]
    # the unsent request's latency runs from its intended time to the window's end: it is the maximum
    assert a["corrected_max_ms"] == pytest.approx((f["window_end_s"].iloc[-1] - f["intended_s"].iloc[-1]) * 1000,
                                                  rel=1e-3)


SLOW_SERVER = r"""
import asyncio, sys

async def handle(reader, writer):
    try:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(float(sys.argv[2]))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def test_a_generator_that_cannot_keep_up_records_unsent_requests_as_censored(tmp_path):
    # One connection, a server that takes 0.4 s per request, 20 requests due in 1 s: most are never
    # sent before the drain ends; none is dropped, and the rate is flagged invalid.
    port = processes.free_port()
    proc = processes.start("slow-server", [sys.executable, "-c", SLOW_SERVER, str(port), "0.4"],
                           tmp_path / "slow.log")
    try:
        assert processes.wait_for_port(port, 10, proc), proc.log_tail()
        result = openloop.run(f"http://127.0.0.1:{port}/", 20.0, 1.0, connections=1, timeout_s=5, drain_s=0.5)
    finally:
        proc.stop()
    df = result.frame()
    assert len(df) == 20
    unsent = df[~df["sent"]]
    assert len(unsent) > 5
    assert np.allclose(unsent["corrected_s"], unsent["window_end_s"] - unsent["intended_s"])
    s = result.summary()
    assert s["invalid"] and s["unsent"] == len(unsent)
    assert s["corrected"]["count"] == 20          # every scheduled request is in the histogram
    assert s["corrected"]["max_ms"] >= 1000 * (1.5 - 1.0)
