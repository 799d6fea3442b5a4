"""The FastAPI application of seed 000: top-rated listings sorted by price, served sync or async.

One app, three variants chosen at start-up (never per request):

- ``sync``:  ``def`` endpoint and the synchronous ``pymongo.MongoClient``. FastAPI runs it in AnyIO's
  worker-thread pool, whose default limiter is set to ``LISTINGS_API_THREAD_TOKENS`` tokens (the
  seed uses 1 to show the queueing effect; AnyIO's default is 40).
- ``async``: ``async def`` endpoint and ``pymongo.AsyncMongoClient``; the seed's
  ``await (await coll.aggregate(pipeline)).to_list()``.
- ``mixed``: ``async def`` endpoint calling the *synchronous* driver: every query blocks the event
  loop (the pitfall the seed warns about, measured here rather than asserted).

Three queries, chosen at start-up (``LISTINGS_API_QUERY``):

- ``page`` (default): ``find({"page_key": "95|<page>"}, PROJECTION)`` on ``listings_page`` sorted
  by price, then ``_id``: page ``page`` of the top-rated listings (rating >= 95) by price, the seed's
  projected fields. ``listings_page`` is a companion collection of those listings' projected fields
  only (MongoDB's subset pattern), 5 to a precomputed ``page_key`` (``harness.core.datasets.Listings``),
  so a request reads about one page of small documents; page 0 is exactly the seed's answer.
- ``fast``: ``find({"search_key": "<market>|<band>"}, PROJECTION)`` sorted by price, then
  ``_id``, first ``limit``: top-rated listings (rating >= 95) of one market and price band, cheapest
  first, nested fields projected. ``search_key`` is precomputed at write time (see
  ``harness.core.datasets.listing_search_key``) because FerretDB 1.24 pushes down top-level equality only:
  with a GIN index on that key in FerretDB's PostgreSQL table, the database reads about 30 full
  documents per request instead of the whole collection (FerretDB decodes each before sorting).
- ``seed``: seed 000's aggregation (below), kept as it was.

Configuration (environment, read once in the lifespan; the CLI below sets the same variables):
    LISTINGS_API_MONGODB_URI     the server (required)
    LISTINGS_API_VARIANT         sync | async | mixed                      (default async)
    LISTINGS_API_QUERY           page | fast | seed                        (default page)
    LISTINGS_API_STATS_FILE      if set, a thread appends every STATS_PERIOD_S a CSV line
                                 epoch_s,borrowed_tokens,total_tokens,in_flight,loop_lag_s (the
                                 thread limiter's busy tokens, requests inside the app, and how long
                                 a callback waited for the event loop): the experiment's bottleneck
                                 evidence, measured outside the loop so a blocked loop cannot hide it
    LISTINGS_API_THREAD_TOKENS   AnyIO default thread-limiter tokens      (default 40)
    LISTINGS_API_DB              database holding listingsAndReviews      (default study)
    LISTINGS_API_MAX_POOL_SIZE   the driver's maxPoolSize                 (default 100, PyMongo's)

The client is created once in the lifespan and closed at shutdown (never one per request). Uvicorn
serves the app in one process; ``--loop uvloop`` selects uvloop:

    LISTINGS_API_MONGODB_URI=mongodb://... \
        python -m uvicorn harness.experiments.fastapi.apps.listings_api:app --loop uvloop
    python -m harness.experiments.fastapi.apps.listings_api --mongodb-uri mongodb://... --variant sync --thread-tokens 1

Endpoints:
    GET /health                  200 {"status": "ok", variant, thread_tokens, ...} once the client
                                 has reached the server (the lifespan pings it before serving).
    GET /listings/top?page=0&limit=5                   (query page)
    GET /listings/top?market=Porto&band=1&limit=5      (query fast)
    GET /listings/top?min_rating=95&limit=5              (query seed): the seed's "complex aggregation": listings whose
                                 review_scores.review_scores_rating >= min_rating, sorted by price
                                 (then _id, so pages are deterministic), the first `limit`, with
                                 nested fields projected (address.market/country/location
                                 coordinates, host name/superhost, the rating, amenities, dates).

The pipeline is ``$match`` + ``$sort`` + ``$limit`` + ``$project`` (inclusion projection only).
FerretDB v1.24 runs every stage of it, but pushes none of them down to PostgreSQL for these
dotted paths (its explain reports filterPushdown/sortPushdown false): it scans and decodes the
whole collection in its own process for each request, so a query costs far more there than on
MongoDB with the index. Computed projections (``$size`` and friends) are not implemented by
FerretDB v1, hence none are used. FerretDB v1 also has no Decimal128, so there `price` is a double
(see harness.core.datasets); on MongoDB it is Decimal128 and is returned as its exact decimal string.

BSON to JSON (``to_json``): ObjectId -> hex string; Decimal128 -> its decimal string (exact, never a
float); datetime -> ISO 8601 with its UTC offset (clients are tz_aware); bytes/Binary -> base64;
nested documents and arrays recursively. The response is built with that function and returned as
a ``JSONResponse`` directly, so FastAPI's jsonable_encoder never sees a BSON type.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import os
import sys
from collections.abc import Mapping
from contextlib import asynccontextmanager
from typing import Any

VARIANTS = ("sync", "async", "mixed")
QUERIES = ("page", "fast", "seed")
STATS_PERIOD_S = 0.25
COLLECTION = "listingsAndReviews"
PAGE_COLLECTION = "listings_page"   # harness.core.datasets.PAGE_COLLECTION
PAGE_MIN_RATING = 95                # harness.core.datasets.SEARCH_MIN_RATING
DEFAULT_MIN_RATING = 95
DEFAULT_LIMIT = 5                  # harness.core.datasets.PAGE_SIZE
MAX_LIMIT = 1000
PROJECTION = {
    "name": 1, "price": 1, "property_type": 1, "room_type": 1, "accommodates": 1,
    "address.market": 1, "address.country": 1, "address.location.coordinates": 1,
    "review_scores.review_scores_rating": 1, "host.host_name": 1, "host.host_is_superhost": 1,
    "amenities": 1, "first_review": 1, "last_review": 1,
}


def pipeline(min_rating: int, limit: int) -> list[dict[str, Any]]:
    """The aggregation every variant runs (tests compare its output with a direct `find`)."""
    return [
        {"$match": {"review_scores.review_scores_rating": {"$gte": min_rating}}},
        {"$sort": {"price": 1, "_id": 1}},
        {"$limit": limit},
        {"$project": PROJECTION},
    ]


def to_json(value: Any) -> Any:
    """A BSON value (as PyMongo decodes it) as plain JSON-serialisable Python."""
    from bson import ObjectId
    from bson.binary import Binary
    from bson.decimal128 import Decimal128

    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, ObjectId):
        return str(value)
    if isinstance(value, Decimal128):
        return str(value.to_decimal())
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # a naive datetime from PyMongo is UTC
            value = value.replace(tzinfo=dt.UTC)
        return value.isoformat()
    if isinstance(value, (bytes, Binary)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


class Settings:
    """The app's start-up configuration, read from the environment."""

    def __init__(self, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        self.mongodb_uri = env.get("LISTINGS_API_MONGODB_URI", "")
        self.variant = env.get("LISTINGS_API_VARIANT", "async")
        self.thread_tokens = int(env.get("LISTINGS_API_THREAD_TOKENS", "40"))
        self.db = env.get("LISTINGS_API_DB", "study")
        self.max_pool_size = int(env.get("LISTINGS_API_MAX_POOL_SIZE", "100"))
        self.query = env.get("LISTINGS_API_QUERY", "page")
        self.stats_file = env.get("LISTINGS_API_STATS_FILE", "")
        if self.query not in QUERIES:
            raise RuntimeError(f"LISTINGS_API_QUERY must be one of {', '.join(QUERIES)}, got {self.query!r}")
        if not self.mongodb_uri:
            raise RuntimeError("LISTINGS_API_MONGODB_URI is not set")
        if self.variant not in VARIANTS:
            raise RuntimeError(f"LISTINGS_API_VARIANT must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if self.thread_tokens < 1:
            raise RuntimeError(f"LISTINGS_API_THREAD_TOKENS must be at least 1, got {self.thread_tokens}")

    def __repr__(self) -> str:
        return (f"Settings(variant={self.variant!r}, thread_tokens={self.thread_tokens}, db={self.db!r}, "
                f"max_pool_size={self.max_pool_size})")


def search_key(market: str, band: int) -> str:
    """The `search_key` value of the fast query (as `harness.core.datasets.listing_search_key` writes it)."""
    return f"{market}|{band}"


def page_key(page: int) -> str:
    """The `page_key` of the page query (as `harness.core.datasets.listing_page_key` writes it)."""
    return f"{PAGE_MIN_RATING}|{page}"


def _sort() -> list[tuple[str, int]]:
    return [("price", 1), ("_id", 1)]


class _Stats:
    """Samples, in its own thread, the limiter's busy tokens, requests in flight and event-loop lag."""

    def __init__(self, path: str, loop, limiter):
        import threading

        self.path, self.loop, self.limiter = path, loop, limiter
        self.in_flight = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="listings-stats", daemon=True)
        self._thread.start()

    def _lag(self) -> float:
        import threading
        import time

        done = threading.Event()
        t0 = time.perf_counter()
        self.loop.call_soon_threadsafe(done.set)
        done.wait(30.0)
        return time.perf_counter() - t0

    def _run(self) -> None:
        import time

        with open(self.path, "a", buffering=1) as f:
            while not self._stop.wait(STATS_PERIOD_S):
                lag = self._lag()
                f.write(f"{time.time()!r},{self.limiter.borrowed_tokens},{self.limiter.total_tokens},"
                        f"{self.in_flight},{lag!r}\n")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=35)


def create_app():
    import asyncio

    import anyio.to_thread
    from fastapi import FastAPI, HTTPException, Query
    from fastapi.responses import JSONResponse

    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app):
        settings = Settings()
        # The limiter every `def` endpoint's thread is drawn from; it must be set inside the loop.
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = settings.thread_tokens
        state["settings"] = settings
        if settings.variant == "async":
            from pymongo import AsyncMongoClient

            client = AsyncMongoClient(settings.mongodb_uri, tz_aware=True, maxPoolSize=settings.max_pool_size)
            await client.admin.command("ping")
        else:
            from pymongo import MongoClient

            client = MongoClient(settings.mongodb_uri, tz_aware=True, maxPoolSize=settings.max_pool_size)
            await anyio.to_thread.run_sync(client.admin.command, "ping")
        state["client"] = client
        state["collection"] = client[settings.db][COLLECTION]
        state["page_collection"] = client[settings.db][PAGE_COLLECTION]
        stats = _Stats(settings.stats_file, asyncio.get_running_loop(), limiter) if settings.stats_file else None
        state["stats"] = stats
        try:
            yield
        finally:
            if stats is not None:
                stats.stop()
            if settings.variant == "async":
                await client.close()
            else:
                client.close()

    app = FastAPI(title="listings API (seed 000)", lifespan=lifespan)

    @app.middleware("http")
    async def count_in_flight(request, call_next):
        stats = state.get("stats")
        if stats is None:
            return await call_next(request)
        stats.in_flight += 1  # only ever changed on the event loop
        try:
            return await call_next(request)
        finally:
            stats.in_flight -= 1

    @app.get("/health")
    async def health():
        s: Settings = state["settings"]
        return {"status": "ok", "variant": s.variant, "query": s.query, "thread_tokens": s.thread_tokens,
                "max_pool_size": s.max_pool_size, "pid": os.getpid()}

    def _limit(limit: int) -> int:
        return min(max(limit, 1), MAX_LIMIT)

    def _fast(market: str | None, band: int | None) -> dict[str, Any]:
        if market is None or band is None:
            raise HTTPException(422, "query fast needs market and band")
        return {"search_key": search_key(market, band)}

    query = os.environ.get("LISTINGS_API_QUERY", "page")
    variant = os.environ.get("LISTINGS_API_VARIANT", "async")

    def sync_docs(min_rating, limit, market, band, page) -> list:
        coll = state["collection"]
        if query == "page":
            return list(state["page_collection"].find({"page_key": page_key(page)}, PROJECTION)
                        .sort(_sort()).limit(_limit(limit)))
        if query == "fast":
            return list(coll.find(_fast(market, band), PROJECTION).sort(_sort()).limit(_limit(limit)))
        return list(coll.aggregate(pipeline(min_rating, _limit(limit))))

    if variant == "sync":
        @app.get("/listings/top")
        def top_listings(min_rating: int = Query(DEFAULT_MIN_RATING), limit: int = Query(DEFAULT_LIMIT),
                         market: str | None = Query(None), band: int | None = Query(None), page: int = Query(0)):
            return JSONResponse(to_json(sync_docs(min_rating, limit, market, band, page)))
    elif variant == "mixed":
        @app.get("/listings/top")
        async def top_listings(min_rating: int = Query(DEFAULT_MIN_RATING), limit: int = Query(DEFAULT_LIMIT),
                               market: str | None = Query(None), band: int | None = Query(None),
                               page: int = Query(0)):
            return JSONResponse(to_json(sync_docs(min_rating, limit, market, band, page)))  # blocks the loop
    else:
        @app.get("/listings/top")
        async def top_listings(min_rating: int = Query(DEFAULT_MIN_RATING), limit: int = Query(DEFAULT_LIMIT),
                               market: str | None = Query(None), band: int | None = Query(None),
                               page: int = Query(0)):
            coll = state["collection"]
            if query == "page":
                docs = await (state["page_collection"].find({"page_key": page_key(page)}, PROJECTION)
                              .sort(_sort()).limit(_limit(limit)).to_list())
            elif query == "fast":
                docs = await coll.find(_fast(market, band), PROJECTION).sort(_sort()).limit(_limit(limit)).to_list()
            else:
                docs = await (await coll.aggregate(pipeline(min_rating, _limit(limit)))).to_list()
            return JSONResponse(to_json(docs))

    return app


app = create_app()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the listings API with uvicorn (one process).")
    ap.add_argument("--mongodb-uri", default=os.environ.get("LISTINGS_API_MONGODB_URI"))
    ap.add_argument("--variant", choices=VARIANTS, default=os.environ.get("LISTINGS_API_VARIANT", "async"))
    ap.add_argument("--thread-tokens", type=int, default=int(os.environ.get("LISTINGS_API_THREAD_TOKENS", "40")))
    ap.add_argument("--db", default=os.environ.get("LISTINGS_API_DB", "study"))
    ap.add_argument("--query", choices=QUERIES, default=os.environ.get("LISTINGS_API_QUERY", "page"))
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    a = ap.parse_args(argv)
    if not a.mongodb_uri:
        ap.error("--mongodb-uri (or LISTINGS_API_MONGODB_URI) is required")
    os.environ.update(LISTINGS_API_MONGODB_URI=a.mongodb_uri, LISTINGS_API_VARIANT=a.variant,
                      LISTINGS_API_THREAD_TOKENS=str(a.thread_tokens), LISTINGS_API_DB=a.db,
                      LISTINGS_API_QUERY=a.query)
    import uvicorn

    # An import string, so the app (and its variant) is built after the environment is set.
    uvicorn.run("harness.experiments.fastapi.apps.listings_api:app", host=a.host, port=a.port, loop=a.loop,
                access_log=False, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
