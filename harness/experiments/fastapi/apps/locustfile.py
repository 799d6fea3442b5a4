"""Locust users for the listings API (seed 000): each user asks for the top listings, then waits.

Run headless, as `harness.experiments.fastapi.locust` does:

    locust -f harness/experiments/fastapi/apps/locustfile.py --headless -u 500 -r 5 -t 110s \
        --host http://127.0.0.1:PORT --csv PREFIX --csv-full-history --only-summary

Settings come from the environment so that every Locust process (master, local `--processes`
workers, or workers on other machines) reads the same ones:
    LISTINGS_PATH           the request's path and query string  (default: the seed query,
                            /listings/top?min_rating=95&limit=20); the experiment sets it
    LISTINGS_WAIT_MIN_S     think time between requests, lower  (default 1.0)
    LISTINGS_WAIT_MAX_S     think time between requests, upper  (default 2.0)
    LISTINGS_TIMEOUT_S      FastHttpUser network/connect timeout (default 60, Locust's own)
    LISTINGS_SAMPLES_DIR    if set, every request is also appended to
                            `<dir>/samples-<pid>.csv` (start_epoch_s, response_time_ms, ok, user,
                            pid, infrastructure), so the harness computes percentiles from raw samples rather than
                            from Locust's bucketed aggregates

A response counts as a failure unless it is HTTP 200 with a JSON array (the endpoint's shape).
`infrastructure` is 1 when the connection was refused (the app is gone), not when it was slow.
"""

from __future__ import annotations

import itertools
import os

from locust import FastHttpUser, between, events, task

PATH = os.environ.get("LISTINGS_PATH", "/listings/top?min_rating=95&limit=20")
WAIT_MIN_S = float(os.environ.get("LISTINGS_WAIT_MIN_S", "1.0"))
WAIT_MAX_S = float(os.environ.get("LISTINGS_WAIT_MAX_S", "2.0"))
TIMEOUT_S = float(os.environ.get("LISTINGS_TIMEOUT_S", "60"))
REQUEST_NAME = "top_listings"
SAMPLES_DIR = os.environ.get("LISTINGS_SAMPLES_DIR")
_user_ids = itertools.count()
_samples = None


def _samples_file():
    global _samples
    if _samples is None:  # opened lazily: with --processes, each forked worker gets its own file
        os.makedirs(SAMPLES_DIR, exist_ok=True)
        _samples = open(os.path.join(SAMPLES_DIR, f"samples-{os.getpid()}.csv"), "a", buffering=1 << 16)
    return _samples


if SAMPLES_DIR:
    @events.request.add_listener
    def _record(request_type, name, response_time, response_length, exception=None, context=None,
                start_time=None, **kwargs):
        user = (context or {}).get("user_id", -1)
        infra = int(exception is not None and (isinstance(exception, ConnectionRefusedError)
                                               or "refused" in str(exception).lower()))
        _samples_file().write(f"{start_time!r},{response_time!r},{int(exception is None)},{user},{os.getpid()},"
                              f"{infra}\n")

    @events.quitting.add_listener
    def _close(environment, **kwargs):
        if _samples is not None:
            _samples.flush()


class ListingsUser(FastHttpUser):
    wait_time = between(WAIT_MIN_S, WAIT_MAX_S)
    network_timeout = TIMEOUT_S
    connection_timeout = TIMEOUT_S

    def on_start(self) -> None:
        self.user_id = next(_user_ids)

    def context(self) -> dict:
        return {"user_id": getattr(self, "user_id", -1)}

    @task
    def top_listings(self) -> None:
        with self.client.get(PATH, name=REQUEST_NAME,
                             catch_response=True) as resp:
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}")
                return
            try:
                body = resp.json()
            except ValueError:
                resp.failure("response is not JSON")
                return
            if not isinstance(body, list):
                resp.failure("response is not a JSON array")
            else:
                resp.success()
