"""The FastAPI application of seed 000: top-rated listings sorted by price, served sync or async.

One app, three variants chosen at start-up (never per request):

- ``sync``:  ``def`` endpoint and the synchronous ``pymongo.MongoClient``. FastAPI runs it in AnyIO's
  worker-thread pool, whose default limiter is set to ``LISTINGS_API_THREAD_TOKENS`` tokens (the
  seed uses 1 to show the queueing effect; AnyIO's default is 40).
- ``async``: ``async def`` endpoint and ``pymongo.AsyncMongoClient``; the seed's
  ``await (await coll.aggregate(pipeline)).to_list()``.
- ``mixed``: ``async def`` endpoint calling the *synchronous* driver: every query blocks the event
  loop (the pitfall the seed warns about, measured here rather than asserted).

Configuration (environment, read once in the lifespan; the CLI below sets the same variables):
    LISTINGS_API_MONGODB_URI     the server (required)
    LISTINGS_API_VARIANT         sync | async | mixed                      (default async)
    LISTINGS_API_THREAD_TOKENS   AnyIO default thread-limiter tokens      (default 40)
    LISTINGS_API_DB              database holding listingsAndReviews      (default study)
    LISTINGS_API_MAX_POOL_SIZE   the driver's maxPoolSize                 (default 100, PyMongo's)

The client is created once in the lifespan and closed at shutdown (never one per request). Uvicorn
serves the app in one process; ``--loop uvloop`` selects uvloop:

    LISTINGS_API_MONGODB_URI=mongodb://... python -m uvicorn harness.apps.listings_api:app --loop uvloop
    python -m harness.apps.listings_api --mongodb-uri mongodb://... --variant sync --thread-tokens 1

Endpoints:
    GET /health                  200 {"status": "ok", variant, thread_tokens, ...} once the client
                                 has reached the server (the lifespan pings it before serving).
    GET /listings/top?min_rating=95&limit=20
                                 the seed's "complex aggregation": listings whose
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
(see harness.datasets); on MongoDB it is Decimal128 and is returned as its exact decimal string.

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
from contextlib import asynccontextmanager
from typing import Any

VARIANTS = ("sync", "async", "mixed")
COLLECTION = "listingsAndReviews"
DEFAULT_MIN_RATING = 95
DEFAULT_LIMIT = 20
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
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.isoformat()
    if isinstance(value, (bytes, Binary)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


class Settings:
    """The app's start-up configuration, read from the environment."""

    def __init__(self, env: dict[str, str] | None = None):
        env = os.environ if env is None else env
        self.mongodb_uri = env.get("LISTINGS_API_MONGODB_URI", "")
        self.variant = env.get("LISTINGS_API_VARIANT", "async")
        self.thread_tokens = int(env.get("LISTINGS_API_THREAD_TOKENS", "40"))
        self.db = env.get("LISTINGS_API_DB", "study")
        self.max_pool_size = int(env.get("LISTINGS_API_MAX_POOL_SIZE", "100"))
        if not self.mongodb_uri:
            raise RuntimeError("LISTINGS_API_MONGODB_URI is not set")
        if self.variant not in VARIANTS:
            raise RuntimeError(f"LISTINGS_API_VARIANT must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if self.thread_tokens < 1:
            raise RuntimeError(f"LISTINGS_API_THREAD_TOKENS must be at least 1, got {self.thread_tokens}")

    def __repr__(self) -> str:
        return (f"Settings(variant={self.variant!r}, thread_tokens={self.thread_tokens}, db={self.db!r}, "
                f"max_pool_size={self.max_pool_size})")


def create_app():
    import anyio.to_thread
    from fastapi import FastAPI, Query
    from fastapi.responses import JSONResponse

    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app):
        settings = Settings()
        # The limiter every `def` endpoint's thread is drawn from; it must be set inside the loop.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.thread_tokens
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
        try:
            yield
        finally:
            if settings.variant == "async":
                await client.close()
            else:
                client.close()

    app = FastAPI(title="listings API (seed 000)", lifespan=lifespan)

    @app.get("/health")
    async def health():
        s: Settings = state["settings"]
        return {"status": "ok", "variant": s.variant, "thread_tokens": s.thread_tokens,
                "max_pool_size": s.max_pool_size, "pid": os.getpid()}

    def _args(min_rating: int, limit: int) -> list[dict[str, Any]]:
        return pipeline(min_rating, min(max(limit, 1), MAX_LIMIT))

    variant = os.environ.get("LISTINGS_API_VARIANT", "async")
    if variant == "sync":
        @app.get("/listings/top")
        def top_listings(min_rating: int = Query(DEFAULT_MIN_RATING), limit: int = Query(DEFAULT_LIMIT)):
            docs = list(state["collection"].aggregate(_args(min_rating, limit)))
            return JSONResponse(to_json(docs))
    elif variant == "mixed":
        @app.get("/listings/top")
        async def top_listings(min_rating: int = Query(DEFAULT_MIN_RATING), limit: int = Query(DEFAULT_LIMIT)):
            docs = list(state["collection"].aggregate(_args(min_rating, limit)))  # blocks the loop
            return JSONResponse(to_json(docs))
    else:
        @app.get("/listings/top")
        async def top_listings(min_rating: int = Query(DEFAULT_MIN_RATING), limit: int = Query(DEFAULT_LIMIT)):
            docs = await (await state["collection"].aggregate(_args(min_rating, limit))).to_list()
            return JSONResponse(to_json(docs))

    return app


app = create_app()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the listings API with uvicorn (one process).")
    ap.add_argument("--mongodb-uri", default=os.environ.get("LISTINGS_API_MONGODB_URI"))
    ap.add_argument("--variant", choices=VARIANTS, default=os.environ.get("LISTINGS_API_VARIANT", "async"))
    ap.add_argument("--thread-tokens", type=int, default=int(os.environ.get("LISTINGS_API_THREAD_TOKENS", "40")))
    ap.add_argument("--db", default=os.environ.get("LISTINGS_API_DB", "study"))
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    a = ap.parse_args(argv)
    if not a.mongodb_uri:
        ap.error("--mongodb-uri (or LISTINGS_API_MONGODB_URI) is required")
    os.environ.update(LISTINGS_API_MONGODB_URI=a.mongodb_uri, LISTINGS_API_VARIANT=a.variant,
                      LISTINGS_API_THREAD_TOKENS=str(a.thread_tokens), LISTINGS_API_DB=a.db)
    import uvicorn

    # An import string, so the app (and its variant) is built after the environment is set.
    uvicorn.run("harness.apps.listings_api:app", host=a.host, port=a.port, loop=a.loop,
                access_log=False, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
