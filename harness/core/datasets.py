"""The seeds' datasets, generated deterministically (fixed seed) and loaded in bulk.

- `Orders(n)`: the `orders` collection of 001: n documents of about 200 bytes of BSON, `customer`
  drawn from 5,000 values ("c0".."c4999") and indexed.
- `Listings(n)`: a `listingsAndReviews` stand-in shaped like MongoDB's sample_airbnb (nested
  address with a GeoJSON point, review scores, price, amenities, host, dates) for 000. Prices are
  Decimal128 as in sample_airbnb on MongoDB; FerretDB v1 has no Decimal128 (it drops the
  connection on one), so there they are doubles of the same values, and the marker says so.
  Top-rated listings (rating >= 95) also carry `search_key` = "<market>|<price // 100>" (indexed),
  the key of the FastAPI study's `fast` query (see `listing_search_key`). Beside it, `listings_page`
  (MongoDB's subset pattern): the top-rated listings' projected fields only, each with `page_key`
  = "<min rating>|<page>", page k holding ranks 20k..20k+19 by (price, _id): the key of the study's
  default query, whose page 0 is seed 000's answer (see `Listings.companions`).
- `Accounts(n)`: the `acct` table of 002: `id` (primary key 1..n), `owner`, `balance`.

Loading is idempotent: each dataset writes a marker (name, size, seed, format) beside itself and is
reloaded only when the marker differs, so repeated runs and tests do not pay for it again.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

from .errors import HarnessError
from .servers import STUDY_DB, ServerStack

SEED = 20261130
CUSTOMERS = 5_000
FORMAT = 1
MARKERS = "_datasets"
_EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Dataset:
    n: int
    name: ClassVar[str]

    def __post_init__(self) -> None:
        if self.n < 1:
            raise HarnessError(f"dataset {self.name}: size must be at least 1, got {self.n}")

    def marker(self) -> dict[str, Any]:
        return {"_id": self.name, "n": self.n, "seed": SEED, "format": FORMAT}

    def ensure(self, stack: ServerStack) -> dict[str, Any]:
        """Load unless already present; returns {dataset, n, loaded, seconds}."""
        t0 = time.perf_counter()
        loaded = self._ensure(stack)
        return {"dataset": self.name, "n": self.n, "loaded": loaded,
                "seconds": round(time.perf_counter() - t0, 3)}

    def _ensure(self, stack: ServerStack) -> bool:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------ MongoDB

def order_document(i: int, rng: random.Random) -> dict[str, Any]:
    n_items = rng.randint(1, 3)
    items: list[dict[str, Any]] = [{"sku": f"sku-{rng.randrange(10_000):05d}", "qty": rng.randint(1, 5),
                                    "price": round(rng.uniform(1, 200), 2)} for _ in range(n_items)]
    return {
        "_id": i,
        "customer": f"c{rng.randrange(CUSTOMERS)}",
        "status": rng.choice(("open", "shipped", "closed")),
        "total": round(sum(x["qty"] * x["price"] for x in items), 2),
        "created": _EPOCH + dt.timedelta(seconds=rng.randrange(365 * 86400)),
        "items": items,
    }


_PROPERTY_TYPES = ("Apartment", "House", "Condominium", "Loft", "Guesthouse", "Serviced apartment")
_ROOM_TYPES = ("Entire home/apt", "Private room", "Shared room")
_MARKETS = (("Porto", "Portugal", "PT", -8.61, 41.15), ("New York", "United States", "US", -73.97, 40.77),
            ("Barcelona", "Spain", "ES", 2.17, 41.39), ("Sydney", "Australia", "AU", 151.21, -33.87),
            ("Istanbul", "Turkey", "TR", 28.98, 41.01), ("Montreal", "Canada", "CA", -73.57, 45.50),
            ("Hong Kong", "Hong Kong", "HK", 114.17, 22.32), ("Rio De Janeiro", "Brazil", "BR", -43.20, -22.91))
_AMENITIES = ("Wifi", "Kitchen", "Heating", "Washer", "Essentials", "TV", "Air conditioning", "Elevator",
              "Hair dryer", "Iron", "Laptop friendly workspace", "Hangers", "Shampoo", "Pool",
              "Free parking on premises", "Smoke detector", "First aid kit", "Coffee maker")


def listing_document(i: int, rng: random.Random, decimal: bool = True) -> dict[str, Any]:
    """One listing; `decimal=False` stores money as doubles (for FerretDB, which lacks Decimal128)."""
    from bson.decimal128 import Decimal128

    def money(v: int):
        d = Decimal(v).quantize(Decimal("0.01"))
        return Decimal128(d) if decimal else float(d)

    market, country, code, lon, lat = rng.choice(_MARKETS)
    rating = min(100, max(20, int(rng.gauss(92, 8))))
    first = _EPOCH - dt.timedelta(days=rng.randrange(200, 3000))
    return {
        "_id": str(10_000_000 + i),
        "listing_url": f"https://example.invalid/rooms/{10_000_000 + i}",
        "name": f"{rng.choice(('Cosy', 'Bright', 'Quiet', 'Central', 'Spacious'))} "
                f"{rng.choice(_PROPERTY_TYPES).lower()} in {market}",
        "summary": " ".join(rng.choice(("near", "metro", "view", "sunny", "garden", "quiet", "old town",
                                        "beach", "market", "walk")) for _ in range(rng.randint(20, 60))),
        "property_type": rng.choice(_PROPERTY_TYPES),
        "room_type": rng.choice(_ROOM_TYPES),
        "accommodates": rng.randint(1, 10),
        "bedrooms": rng.randint(0, 5),
        "beds": rng.randint(1, 6),
        "number_of_reviews": rng.randint(0, 400),
        "first_review": first,
        "last_review": first + dt.timedelta(days=rng.randrange(0, 200)),
        "amenities": rng.sample(_AMENITIES, rng.randint(3, len(_AMENITIES))),
        "price": money(rng.randint(20, 900)),
        "cleaning_fee": money(rng.randint(0, 120)),
        "host": {"host_id": str(rng.randrange(10**8)), "host_name": f"host{rng.randrange(5000)}",
                 "host_is_superhost": rng.random() < 0.2, "host_listings_count": rng.randint(1, 30)},
        "address": {"street": f"{market}, {country}", "market": market, "country": country,
                    "country_code": code,
                    "location": {"type": "Point", "coordinates": [round(lon + rng.uniform(-0.1, 0.1), 5),
                                                                   round(lat + rng.uniform(-0.1, 0.1), 5)],
                                 "is_location_exact": rng.random() < 0.5}},
        "review_scores": {"review_scores_rating": rating,
                          **{k: min(10, max(2, int(round(rating / 10 + rng.uniform(-1, 0.5)))))
                             for k in ("review_scores_accuracy", "review_scores_cleanliness",
                                       "review_scores_checkin", "review_scores_communication",
                                       "review_scores_location", "review_scores_value")}},
    }


# A top-level key precomputed at write time (MongoDB's "computed pattern"), so that the FastAPI
# study's default query is one equality FerretDB 1.24 can push down to PostgreSQL: it pushes down
# equality on top-level fields only (no range, no sort, no nested path without a test-only flag).
SEARCH_MIN_RATING = 95     # the seed's "high-rated" threshold
SEARCH_PRICE_BAND = 100    # price bands of this width: about 27 top-rated listings per market and band


# MongoDB's subset pattern for the FastAPI study's default query: a small companion collection of
# the top-rated listings' projected fields, PAGE_SIZE per precomputed `page_key`, so that a request
# reads and decodes one page of small documents (FerretDB pushes down the top-level equality only).
PAGE_COLLECTION = "listings_page"
# 5, not the seed's 20 (its pagination example's `limit`): FerretDB 1.24 spends about 3 ms of CPU per
# query plus about 0.4 ms per listing it decodes (measured on this machine), so a page of 20 cost
# ~9 ms of database CPU per request and made the database, not the app, the async app's limit
# (1.1 cores at 123 req/s in run 20261130T124143Z-quick-8d5d). A decision made after that run and
# said so in the README; `--set page_size=5` is the only page size the companion collection serves.
PAGE_SIZE = 5
PAGE_FIELDS = ("name", "price", "property_type", "room_type", "accommodates", "address.market",
               "address.country", "address.location.coordinates", "review_scores.review_scores_rating",
               "host.host_name", "host.host_is_superhost", "amenities", "first_review", "last_review")


def listing_page_key(page: int) -> str:
    """`"<SEARCH_MIN_RATING>|<page>"`: page 0 is the seed's first page (rating >= 95, by price)."""
    return f"{SEARCH_MIN_RATING}|{page}"


def listing_search_key(doc: dict[str, Any]) -> str | None:
    """`"<market>|<band>"` for a listing rated at least SEARCH_MIN_RATING, else None."""
    if doc["review_scores"]["review_scores_rating"] < SEARCH_MIN_RATING:
        return None
    price = doc["price"]
    price = float(price.to_decimal()) if hasattr(price, "to_decimal") else float(price)
    return f"{doc['address']['market']}|{int(price // SEARCH_PRICE_BAND)}"


class _MongoDataset(Dataset):
    batch: ClassVar[int] = 10_000

    def document(self, i: int, rng: random.Random, ferretdb: bool) -> dict[str, Any]:
        raise NotImplementedError

    def indexes(self, collection) -> None:
        pass

    def companions_present(self, db) -> bool:
        """True when the collections derived from this one are in place (none by default)."""
        return True

    def companions(self, db) -> None:
        """Build the collections derived from this one, after it is loaded."""

    def _ensure(self, stack: ServerStack) -> bool:
        import pymongo

        with pymongo.MongoClient(stack.mongodb_uri) as client:
            db = client[STUDY_DB]
            ferretdb = "ferretdbVersion" in client.admin.command("buildInfo")
            marker = {**self.marker(), "ferretdb": ferretdb}  # FerretDB: prices are doubles
            if db[MARKERS].find_one({"_id": self.name}) == marker \
                    and db[self.name].estimated_document_count() == self.n and self.companions_present(db):
                return False
            db[MARKERS].delete_one({"_id": self.name})
            db[self.name].drop()
            rng = random.Random(f"{SEED}:{self.name}")
            docs = []
            for i in range(self.n):
                docs.append(self.document(i, rng, ferretdb))
                if len(docs) == self.batch:
                    db[self.name].insert_many(docs, ordered=False)
                    docs = []
            if docs:
                db[self.name].insert_many(docs, ordered=False)
            self.indexes(db[self.name])
            self.companions(db)
            db[MARKERS].insert_one(marker)
        return True


@dataclass(frozen=True)
class Orders(_MongoDataset):
    name: ClassVar[str] = "orders"

    def document(self, i, rng, ferretdb):
        return order_document(i, rng)

    def indexes(self, collection) -> None:
        collection.create_index("customer")


@dataclass(frozen=True)
class Listings(_MongoDataset):
    name: ClassVar[str] = "listingsAndReviews"
    batch: ClassVar[int] = 1_000

    def marker(self) -> dict[str, Any]:
        return {**super().marker(), "shape": "search_key"}  # documents gained `search_key`

    def document(self, i, rng, ferretdb):
        doc = listing_document(i, rng, decimal=not ferretdb)
        key = listing_search_key(doc)
        if key is not None:
            doc["search_key"] = key
        return doc

    def indexes(self, collection) -> None:
        collection.create_index("review_scores.review_scores_rating")
        collection.create_index("search_key")

    def companions_present(self, db) -> bool:
        m = db[MARKERS].find_one({"_id": PAGE_COLLECTION})
        return m is not None and m.get("format") == self._page_format() \
            and db[PAGE_COLLECTION].estimated_document_count() == m.get("n")

    def _page_format(self) -> dict[str, Any]:
        return {"of": self.name, "n_listings": self.n, "seed": SEED, "page_size": PAGE_SIZE,
                "min_rating": SEARCH_MIN_RATING, "fields": list(PAGE_FIELDS), "order": ["price", "_id"]}

    def companions(self, db) -> None:
        """`listings_page`, built from the loaded listings (so it is what they hold, on either server):
        the top-rated listings ranked by (price, _id), PAGE_SIZE to a `page_key`. Deterministic; its
        marker (`_datasets`, `_id` "listings_page") records the format and the page sizes."""
        def price(d: dict[str, Any]) -> Decimal:
            v = d["price"]
            return v.to_decimal() if hasattr(v, "to_decimal") else Decimal(str(v))

        db[MARKERS].delete_one({"_id": PAGE_COLLECTION})
        db[PAGE_COLLECTION].drop()
        top = db[self.name].find({"review_scores.review_scores_rating": {"$gte": SEARCH_MIN_RATING}},
                                 {f: 1 for f in PAGE_FIELDS})
        ranked = sorted(top, key=lambda d: (price(d), d["_id"]))
        for rank, d in enumerate(ranked):
            d["page_key"] = listing_page_key(rank // PAGE_SIZE)
        if ranked:
            db[PAGE_COLLECTION].insert_many(ranked, ordered=False)
        db[PAGE_COLLECTION].create_index("page_key")
        sizes = [min(PAGE_SIZE, len(ranked) - k) for k in range(0, len(ranked), PAGE_SIZE)]
        db[MARKERS].insert_one({"_id": PAGE_COLLECTION, "format": self._page_format(), "n": len(ranked),
                                "pages": len(sizes), "largest_page": max(sizes, default=0),
                                "smallest_page": min(sizes, default=0)})


# --------------------------------------------------------------------------------------- PostgreSQL

@dataclass(frozen=True)
class Accounts(Dataset):
    name: ClassVar[str] = "acct"

    def _ensure(self, stack: ServerStack) -> bool:
        import psycopg
        from psycopg.types.json import Jsonb

        marker = self.marker()
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {MARKERS} (name text PRIMARY KEY, marker jsonb)")
            row = conn.execute(f"SELECT marker FROM {MARKERS} WHERE name = %s", (self.name,)).fetchone()
            if row and row[0] == marker and (conn.execute("SELECT to_regclass('acct')").fetchone() or (None,))[0]:
                return False
            with conn.transaction():
                conn.execute("DROP TABLE IF EXISTS acct")
                conn.execute("CREATE TABLE acct (id integer PRIMARY KEY, owner text NOT NULL, "
                             "balance numeric(12, 2) NOT NULL)")
                rng = random.Random(f"{SEED}:{self.name}")
                with conn.cursor().copy("COPY acct (id, owner, balance) FROM STDIN") as copy:
                    for i in range(1, self.n + 1):
                        copy.write_row((i, f"owner{rng.randrange(20_000)}",
                                        Decimal(rng.randrange(0, 10_000_000)) / 100))
                conn.execute(f"DELETE FROM {MARKERS} WHERE name = %s", (self.name,))
                conn.execute(f"INSERT INTO {MARKERS} VALUES (%s, %s)", (self.name, Jsonb(marker)))
            conn.execute("VACUUM ANALYZE acct")
        return True

