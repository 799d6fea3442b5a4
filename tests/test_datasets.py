"""Datasets load with the right counts, shapes and indexes, deterministically and idempotently."""

import bson
import psycopg
import pymongo

from harness.core import datasets
from harness.core.servers import STUDY_DB


def test_orders_count_index_and_size(stack):
    info = datasets.Orders(3_000).ensure(stack)
    assert info["n"] == 3_000
    with pymongo.MongoClient(stack.mongodb_uri) as c:
        col = c[STUDY_DB]["orders"]
        assert col.count_documents({}) == 3_000
        indexed = [list(ix["key"].keys()) for ix in col.list_indexes()]
        assert ["customer"] in indexed
        docs = list(col.find().limit(500))
        sizes = [len(bson.encode(d)) for d in docs]
        assert 150 <= sum(sizes) / len(sizes) <= 250  # "about 200 bytes", as in 001
        customers = {d["customer"] for d in col.find({}, {"customer": 1})}
        assert all(c.startswith("c") and 0 <= int(c[1:]) < datasets.CUSTOMERS for c in customers)
    again = datasets.Orders(3_000).ensure(stack)
    assert again["loaded"] is False  # the marker matched: no reload


def test_orders_are_deterministic(stack):
    datasets.Orders(1_000).ensure(stack)
    with pymongo.MongoClient(stack.mongodb_uri) as c:
        first = c[STUDY_DB]["orders"].find_one({"_id": 123})
    import random
    rng = random.Random(f"{datasets.SEED}:orders")
    expected = [datasets.order_document(i, rng) for i in range(124)][123]
    assert first["customer"] == expected["customer"] and first["total"] == expected["total"]


def test_listings_shape(stack):
    datasets.Listings(300).ensure(stack)
    with pymongo.MongoClient(stack.mongodb_uri) as c:
        col = c[STUDY_DB]["listingsAndReviews"]
        assert col.count_documents({}) == 300
        doc = col.find_one()
        assert doc["address"]["location"]["type"] == "Point"
        ferretdb = "ferretdbVersion" in c.admin.command("buildInfo")
        assert isinstance(doc["price"], float if ferretdb else bson.decimal128.Decimal128)
        assert 0 < doc["review_scores"]["review_scores_rating"] <= 100
        assert doc["amenities"]


def test_accounts_table(stack):
    datasets.Accounts(5_000).ensure(stack)
    with psycopg.connect(stack.postgres_dsn) as conn:
        assert conn.execute("SELECT count(*), min(id), max(id) FROM acct").fetchone() == (5_000, 1, 5_000)
        pk = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'acct' "
                          "AND indexdef LIKE '%UNIQUE%(id)%'").fetchone()[0]
        assert pk == 1
    assert datasets.Accounts(5_000).ensure(stack)["loaded"] is False
