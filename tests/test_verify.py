"""`harness verify WORKLOAD.toml` (issue 24) against the session's real servers, at small sizes.

- bad input: one line naming the problem, exit 2, no run written, nothing written to the target;
- the examples run end to end through the command and give a verdict for every check;
- a check can fail: the bare pool starves tasks where the semaphore does not, and one large batch
  stalls the loop where small batches do not;
- a target off loopback runs only with --confirm-host naming it, exercised on a server of the
  test's own in a network namespace the test creates (a veth pair, torn down after).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import harness

from harness.core import config, datasets, store, workload_file
from harness.core.errors import HarnessError
from harness.experiments import registry
from harness.experiments.verify import analysis as verify
from harness.running import verify as verify_mod

REPO_ROOT = config.REPO_ROOT
PG_EXAMPLE = REPO_ROOT / "examples" / "workloads" / "postgres_accounts.toml"
MONGO_EXAMPLE = REPO_ROOT / "examples" / "workloads" / "mongodb_orders.toml"


def write(tmp_path: Path, text: str, name: str = "w.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def small(example: Path, load: str) -> str:
    """An example workload with its [load] section replaced by `load` (small sizes for the suite)."""
    text = example.read_text()
    return text[: text.index("[load]")] + "[load]\n" + load + "\n"


# ------------------------------------------------------------------------------------------ bad input

PG_TARGET = "postgresql://postgres@127.0.0.1:{port}/study"
BAD = {
    "unknown key": ('target = "local"\ndataset = "accounts"\ncolour = "blue"\n[postgres]\nrequest = ["SELECT 1"]\n',
                    "colour: unknown key"),
    "malformed statement": ('target = "local"\ndataset = "accounts"\n[postgres]\nrequest = ["(( 1"]\n',
                            "postgres.request[0]: malformed statement"),
    "write without allow_writes": ('target = "{dsn}"\n[postgres]\nrequest = ["DELETE FROM acct WHERE id = :id"]\n'
                                   'params.id = {{ int = [1, 10] }}\n', "postgres.request[0]: DELETE is not a read"),
    "empty query list": ('target = "local"\ndataset = "accounts"\n[postgres]\nrequest = []\n',
                         "postgres.request: List should have at least 1 item"),
    "placeholder without generator": ('target = "local"\ndataset = "accounts"\n[postgres]\n'
                                      'request = ["SELECT 1 WHERE :x = 1"]\n', "no generator for placeholder :x"),
    "unreachable target": ('target = "postgresql://postgres@127.0.0.1:9/study"\n[postgres]\nrequest = ["SELECT 1"]\n',
                           "target: no PostgreSQL server answered"),
    "non-loopback target without confirmation": (
        'target = "postgresql://postgres@192.0.2.7:5432/study"\n[postgres]\nrequest = ["SELECT 1"]\n',
        "target host 192.0.2.7 is not on loopback; to aim this load at it, pass --confirm-host 192.0.2.7"),
    # a MongoDB workload is a find: no pipeline, so no $out or $merge stage (issue 31)
    "aggregation pipeline": ('target = "local"\ndataset = "orders"\n[mongodb]\ncollection = "orders"\nfilter = {}\n'
                             'pipeline = [{ "$out" = "copy" }]\n', "mongodb.pipeline: unknown key"),
    "write stage in the filter": ('target = "local"\ndataset = "orders"\n[mongodb]\ncollection = "orders"\n'
                                  'filter = { "$merge" = "copy" }\n',
                                  "mongodb.filter: only query operators are allowed at the top level"),
    "wrong scheme": ('target = "mongodb://127.0.0.1:27017/"\n[postgres]\nrequest = ["SELECT 1"]\n',
                     "target: expected \"local\" or a postgresql:// URI"),
}


def _acct_rows(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as c:
        c.execute("CREATE TABLE IF NOT EXISTS acct (id integer PRIMARY KEY, owner text NOT NULL, "
                  "balance numeric(12, 2) NOT NULL)")
        return c.execute("SELECT count(*) FROM acct").fetchone()[0]


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_workload_is_one_line_and_writes_nothing(case, tmp_path, stack):
    text, expected = BAD[case]
    path = write(tmp_path, text.replace("{dsn}", stack.postgres_dsn).replace("{{", "{").replace("}}", "}"))
    data = tmp_path / "data"
    before = _acct_rows(stack.postgres_dsn)
    with pytest.raises(HarnessError) as e:
        verify_mod.prepare(path, data_dir=data)
    assert expected in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not (data / "runs").exists() or not any((data / "runs").iterdir())
    assert _acct_rows(stack.postgres_dsn) == before


@pytest.mark.parametrize("case", ["unknown key", "unreachable target"])
def test_the_command_says_it_in_one_line_with_exit_2(case, tmp_path):
    text, expected = BAD[case]
    data = tmp_path / "data"
    out = harness("verify", str(write(tmp_path, text)), "--data-dir", str(data), timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert not (data / "runs").exists() or not any((data / "runs").iterdir())


def test_the_experiment_runs_the_preflight_itself(run_experiment, stack):
    """`harness run verify_postgres` (and a `local` target, whose server the run starts) gets no
    pre-flight from `harness verify`'s preparation: the repeat runs it before any variant, and a
    write hidden in a CTE fails the repeat there, naming the statement. (Through the command, a
    user's target stops before any repeat: tests/test_faults.py, class 11.)"""
    import json

    before = _acct_rows(stack.postgres_dsn)
    cte = "WITH d AS (DELETE FROM acct WHERE id = :id RETURNING id) SELECT count(*) FROM d"
    body = {"postgres": {"request": [cte], "params": {"id": {"int": [1, 10]}}}}
    result, tables = run_experiment("verify_postgres", workload=json.dumps(body))
    assert result["status"] == "failed"
    assert "postgres.request[0]" in result["error"] and "read-only pre-flight" in result["error"], result["error"]
    assert "windows" not in tables          # no variant ran
    assert _acct_rows(stack.postgres_dsn) == before


def test_workload_file_errors_name_the_key():
    with pytest.raises(HarnessError, match=r"w: load.pools.0: Input should be greater than 0"):
        workload_file.parse({"target": "local", "dataset": "accounts", "postgres": {"request": ["SELECT 1"]},
                             "load": {"pools": [0]}}, "w")
    with pytest.raises(HarnessError, match=r"w: load.duration_s: Input should be less than or equal to 60"):
        workload_file.parse({"target": "local", "dataset": "accounts", "postgres": {"request": ["SELECT 1"]},
                             "load": {"duration_s": 3600}}, "w")
    with pytest.raises(HarnessError, match=r"give exactly one of \[postgres\] and \[mongodb\]"):
        workload_file.parse({"target": "local", "dataset": "accounts"}, "w")


def test_placeholders_become_each_drivers_own():
    sql = "SELECT x::int, '50%' FROM t WHERE a = :a AND b BETWEEN :a AND :b"
    assert workload_file.to_psycopg(sql) == "SELECT x::int, '50%%' FROM t WHERE a = %(a)s AND b BETWEEN %(a)s AND %(b)s"
    assert workload_file.to_asyncpg(sql) == ("SELECT x::int, '50%' FROM t WHERE a = $1 AND b BETWEEN $1 AND $2",
                                            ["a", "b"])


# ------------------------------------------------------------------------------------------ end to end

def test_every_check_has_a_verdict_in_the_smoke_run(smoke_run):
    checks = verify.checks(smoke_run)
    assert set(checks["check"]) == {"002-pool-bound", "002-limit", "002-tail", "002-decide",
                                    "001-fairness", "001-stall", "001-migration", "001-client"}
    assert set(checks["verdict"]) <= set(verify.VERDICTS)
    assert checks["advice"].str.len().min() > 0


def test_the_postgres_example_runs_through_the_command(verify_cli):
    """The example's request on the session's PostgreSQL with a small [load] (conftest `verify_cli`,
    shared with the credentials test): a run like any other, a verdict line per check on stdout,
    and the one-page report."""
    assert verify_cli.returncode == 0, verify_cli.stderr[-3000:]
    run = store.open_run("latest", verify_cli.data)
    assert run.experiments["verify_postgres"]["repeats_planned"] == 2
    assert set(run.experiments["verify_postgres"]["params"]["models"]) == {"threads_psycopg", "uvloop_asyncpg"}
    checks = verify.checks(run)
    assert len(checks) == 2 * 3 + 1           # pool-bound, limit, tail per model; one decision
    for c in checks.itertuples():
        assert f"{c.check:15} {c.subject}" in verify_cli.stdout
    assert (run.path / "report" / "index.html").exists()
    assert "06_workload.ipynb" in (run.path / "report" / "index.html").read_text()
    # the role first (issue 69): on the study's own cluster a superuser runs, and says so
    role = "role postgres on database study (the study's own cluster): a superuser: it can write anything"
    assert verify_cli.stdout.index(role) < verify_cli.stdout.index("002-"), verify_cli.stdout
    page = "".join(p.read_text() for p in (run.path / "report").rglob("*.html"))
    assert role in page


# The checks these tests do not judge, at the smoke profile's sizes (the defaults: 50 clients opened
# one after another, 2,000 documents inserted one by one in every repeat)
SMALL_SIDE_CHECKS = {"client_queries": 10, "write_documents": 200}


def _mongo_run(tmp_path: Path, body: str, stack_env: dict[str, str], **sizes: int) -> store.Run:
    """`harness verify` of `body` on the session's servers, as `verify.run` does it, with the
    experiment's parameters `sizes` on top of the workload file's."""
    path = write(tmp_path, body)
    with pytest.MonkeyPatch.context() as mp:  # a module fixture calls it, so not the `monkeypatch` fixture
        for k, v in stack_env.items():
            mp.setenv(k, v)
        w, overrides = verify_mod.prepare(path, (), tmp_path / "data")
        return store.Run(verify_mod.execute(w, {**overrides, **sizes}, data_dir=tmp_path / "data"))


@pytest.fixture(scope="module")
def mongo_checks(tmp_path_factory, stack_env, stack) -> SimpleNamespace:
    """One `harness verify` run of a starved pool (60 tasks on 2 connections) with allow_writes = true,
    read by two tests (runs of their own took 20 and 11 s): fairness, and the write check, with the
    orders collection's size before. The stall check keeps a run of its own: beside this load, its
    one large read read `inconclusive` in 2 of 8 runs here (alone, 0 of 3)."""
    import pymongo

    tmp_path = tmp_path_factory.mktemp("mongo-checks")
    body = ('target = "local"\ndataset = "orders"\nallow_writes = true\n[mongodb]\ncollection = "orders"\n'
            'filter = { customer = ":c" }\nparams.c = { choice = ["c1", "c2", "c3", "c4", "c5"] }\n'
            '[load]\ntasks = 60\nthreads = 4\npools = [2]\nduration_s = 1.0\nwarmup_s = 0.2\nrepeats = 3\n')
    # the run's own orders first (target = "local" loads them at the full size): the count before
    # is then the user's collection as the run finds it, whichever test sized it last
    datasets.Orders(registry.get("verify_mongo").params("full").documents).ensure(stack)
    with pymongo.MongoClient(stack.mongodb_uri) as c:
        before = c["study"]["orders"].estimated_document_count()
    return SimpleNamespace(run=_mongo_run(tmp_path, body, stack_env, **SMALL_SIDE_CHECKS), orders_before=before)


def test_a_starved_pool_fails_fairness_and_the_semaphore_passes(mongo_checks):
    checks = verify.checks(mongo_checks.run).set_index(["check", "subject"])
    assert checks.loc[("001-fairness", "bare[pool=2]"), "verdict"] == "fail", checks.loc["001-fairness"].to_dict()
    semaphore = checks.loc[("001-fairness", "semaphore[pool=2]")]
    if semaphore["verdict"] == "inconclusive" and "other processes used" in semaphore["reason"]:
        # the check refusing windows that another process shared is the check working (a CI machine's
        # neighbour or hypervisor, issue 32's steal); it says so, and this test cannot judge the fix then
        pytest.skip(f"the machine was not the workload's alone: {semaphore['reason']}")
    assert semaphore["verdict"] == "pass", semaphore["reason"]


def counts(pairs: list[tuple[int, int]]):
    import pandas as pd

    return pd.DataFrame({"ops_per_task_min": [a for a, _ in pairs], "ops_per_task_max": [b for _, b in pairs],
                         "fewest_over_most": [a / b for a, b in pairs]})


def test_a_limit_not_identified_suggests_more_clients_only_to_a_client_with_cpu_to_spare():
    import pandas as pd

    def limit_row(cpu_pct: float) -> dict:
        g = pd.DataFrame({"repeat": range(5), "limit": ["not identified"] * 5, "cpu_pct": [cpu_pct] * 5,
                          "limit_reason": ["4% of pool bound, client ..."] * 5})
        return verify._limit_row(g, "threads_psycopg, pool 20", [20], None, "")

    busy, idle = limit_row(101.0), limit_row(40.0)
    assert busy["verdict"] == idle["verdict"] == "fail"
    assert "client ran 101% of a core" in busy["advice"] and "too light" not in busy["advice"]
    assert "too light (more clients)" in idle["advice"]
    assert "too light" in verify.not_identified_advice(float("nan"))   # CPU not measured: no claim on it


def test_evenness_that_agrees_in_every_repeat_is_judged_on_the_counts_resolution():
    """Fewest / most per task is a ratio of whole counts: three repeats of 19 / 20 give a zero-width
    t-interval (which alone would read "no evidence"), so the interval is the counts' resolution."""
    fair = verify.count_ratio_interval(counts([(19, 20)] * 3))
    assert fair["ci_low"] == pytest.approx(18.5 / 20.5) and fair["ci_high"] == 1.0
    assert verify.judge_interval(fair, verify.EVEN, "above")[0] == verify.PASS
    starved = verify.count_ratio_interval(counts([(1, 20)] * 3))
    assert starved["ci_high"] == pytest.approx(1.5 / 19.5)
    assert verify.judge_interval(starved, verify.EVEN, "above")[0] == verify.FAIL
    # at the threshold the resolution straddles it: no verdict
    assert verify.judge_interval(verify.count_ratio_interval(counts([(10, 20)] * 3)), verify.EVEN,
                                 "above")[0] == verify.INCONCLUSIVE
    # repeats that differ keep their own t-interval; too few repeats stay without one
    spread = counts([(15, 20), (18, 20), (19, 20)])
    assert verify.count_ratio_interval(spread) == verify.interval(spread["fewest_over_most"])
    assert verify.judge_interval(verify.count_ratio_interval(counts([(19, 20)] * 2)), verify.EVEN,
                                 "above")[0] == verify.INCONCLUSIVE


def test_one_large_batch_fails_the_stall_check_where_small_batches_pass(tmp_path, stack_env):
    """On FerretDB the default batches are small, so the seed's 16 MiB batch is asked for as
    batch_size = the whole collection (20,000 documents). The check judges the loop thread's own CPU
    in its longest stall (the wait for a core left out): here 60-66 ms for the one batch and 0.9-2.1 ms
    per batch of 100 (12 repeats of each, 4 December). The limit, 20 ms (the seed's is 10 ms), stands
    3x under the one and about 10x over the other, so a client twice as fast still fails the one batch.
    Run as the command runs it (verify.prepare, verify.execute): that path and `study.run` read the
    same, 2 runs each."""
    body = ('target = "local"\ndataset = "orders"\n[mongodb]\ncollection = "orders"\n'
            'filter = { customer = ":c" }\nparams.c = { choice = ["c1"] }\n'
            'large_read = { filter = {}, batch_sizes = [100, 20000], default_batching = false, stall_limit_ms = 20 }\n'
            '[load]\ntasks = 4\nthreads = 2\npools = [2]\nduration_s = 0.2\nwarmup_s = 0.0\nrepeats = 3\n')
    run = _mongo_run(tmp_path, body, stack_env, **SMALL_SIDE_CHECKS, documents=20_000)
    checks = verify.checks(run).set_index(["check", "subject"])
    stall = checks.loc["001-stall"]
    assert stall.loc["large_read[batch_size=20000]", "verdict"] == "fail", stall.to_dict()
    assert stall.loc["large_read[batch_size=100]", "verdict"] == "pass", stall.to_dict()


# ------------------------------------------------------------------------------- a target off loopback

FORWARDER = """
import asyncio, sys
listen_host, listen_port, to_host, to_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data); await w.drain()
    finally:
        w.close()
async def handle(r, w):
    tr, tw = await asyncio.open_connection(to_host, to_port)
    await asyncio.gather(pipe(r, tw), pipe(tr, w), return_exceptions=True)
async def main():
    server = await asyncio.start_server(handle, listen_host, listen_port)
    print("ready", flush=True)
    async with server:
        await asyncio.wait_for(server.serve_forever(), timeout=float(sys.argv[5]))
asyncio.run(main())
"""


@pytest.fixture
def namespaced_server(stack, tmp_path):
    """A PostgreSQL server of the test's own in a network namespace the test creates: a veth pair
    (10.231.x.1 here, 10.231.x.2 in the namespace) and, inside the namespace, a TCP forwarder on
    10.231.x.2:6543 to the session's PostgreSQL (through a second forwarder on the host side of
    the pair, since the server listens on loopback). Torn down after; every process is bounded
    to 300 s."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create a network namespace")
    from urllib.parse import urlsplit

    n = os.getpid() % 200 + 20
    ns, host_if, ns_if = f"hv{os.getpid()}", f"hva{os.getpid() % 100000}", f"hvb{os.getpid() % 100000}"
    host_ip, ns_ip = f"10.231.{n}.1", f"10.231.{n}.2"
    pg = urlsplit(stack.postgres_dsn)
    script = tmp_path / "forward.py"
    script.write_text(FORWARDER)
    steps = [["ip", "netns", "add", ns], ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
             ["ip", "link", "set", ns_if, "netns", ns], ["ip", "addr", "add", f"{host_ip}/30", "dev", host_if],
             ["ip", "link", "set", host_if, "up"],
             ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if],
             ["ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up"],
             ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]]
    procs = []
    try:
        for s in steps:
            subprocess.run(s, check=True, capture_output=True, timeout=20)
        for cmd in ([sys.executable, str(script), host_ip, "6544", pg.hostname, str(pg.port), "300"],
                    ["ip", "netns", "exec", ns, sys.executable, str(script), ns_ip, "6543", host_ip, "6544", "300"]):
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            procs.append(p)
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield f"postgresql://postgres@{ns_ip}:6543/study", ns_ip
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def test_a_target_off_loopback_needs_its_host_confirmed(namespaced_server, stack, tmp_path):
    """... and a role that can only read: a superuser there is refused before any load unless the
    user says a writable role is fine (issue 69), while a `pg_read_all_data` role runs, its rights the
    report's first line, the row counters watched on an idle target. The run does nothing to that
    server but the workload's reads: no pgbench ceiling, whose table would be a write (the table is
    dropped first, so its absence after is the run's)."""
    import psycopg

    from harness.core import calibration

    dsn, host = namespaced_server
    _acct_rows(stack.postgres_dsn)      # the table the workload reads exists whichever test ran first
    with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {calibration.TABLE}")
        if conn.execute("SELECT to_regrole('verify_reader')").fetchone() == (None,):
            conn.execute("CREATE ROLE verify_reader LOGIN IN ROLE pg_read_all_data")
    assert not workload_file.is_loopback(host)
    load = ('[postgres]\nrequest = ["SELECT owner FROM acct WHERE id = :id"]\nparams.id = { int = [1, 1000] }\n'
            '[load]\nclients = 2\npools = [2]\nmodels = ["uvloop_asyncpg"]\nduration_s = 0.3\nwarmup_s = 0.1\n'
            'repeats = 1\n')
    path = write(tmp_path, f'target = "{dsn}"\n{load}')
    reader = write(tmp_path, f'target = "{dsn.replace("postgres@", "verify_reader@")}"\n{load}', "reader.toml")
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STUDY_")}
    refused = harness("verify", str(path), "--data-dir", str(data), "--no-report", env=env, timeout=60)
    assert refused.returncode == 2 and f"pass --confirm-host {host}" in refused.stderr, refused.stderr
    assert not (data / "runs").exists()
    wrong = harness("verify", str(path), "--data-dir", str(data), "--no-report", "--confirm-host", "10.0.0.1", env=env,
                    timeout=60)
    assert wrong.returncode == 2, wrong.stderr
    writable = harness("verify", str(path), "--data-dir", str(data), "--no-report", "--confirm-host", host, env=env,
                       timeout=60)
    assert writable.returncode == 2 and "target: role postgres is a superuser of database study" in writable.stderr \
        and "--writable-role-ok" in writable.stderr and len(writable.stderr.strip().splitlines()) == 1, writable.stderr
    assert not (data / "runs").exists() or not any((data / "runs").iterdir())
    verify_mod.prepare(path, (host,), data, verify_mod.Permissions(writable_role_ok=True))   # said: it passes
    ran = harness("verify", str(reader), "--data-dir", str(data), "--no-report", "--confirm-host", host,
                  "--idle-target", env=env, timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    role = "role verify_reader on database study (not the study's own cluster): can write no table: reads only"
    assert role in ran.stdout.splitlines(), ran.stdout
    run = store.open_run("latest", data)
    assert run.experiments["verify_postgres"]["status"] == "ok"
    assert run.result("verify_postgres", 0)["notes"]["rows_watched"] is True
    assert host in run.manifest["servers"]["postgres"]["uri"]
    assert "not measured" in run.manifest["calibration"]["before"]["pgbench"]["error"]
    with psycopg.connect(stack.postgres_dsn) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (calibration.TABLE,)).fetchone() == (None,)


def test_the_write_check_runs_only_in_a_scratch_collection_it_drops(mongo_checks, stack):
    """allow_writes = true adds seed 001's bulk-write check; the user's collection is untouched and
    no scratch collection is left behind."""
    import pymongo

    run = mongo_checks.run
    checks = verify.checks(run)
    bulk = checks[checks["check"] == "001-bulk"]
    assert len(bulk) == 1 and bulk["verdict"].iloc[0] in verify.VERDICTS, checks.to_dict("records")
    writes = run.table("verify_mongo", "writes")
    assert set(writes["method"]) == {"insert_one", "insert_many"} and writes["ok"].all()
    assert len(writes) == 2 * run.experiments["verify_mongo"]["repeats_planned"]   # each method in each repeat
    with pymongo.MongoClient(stack.mongodb_uri) as c:
        assert c["study"]["orders"].estimated_document_count() == mongo_checks.orders_before
        assert not [n for n in c["study"].list_collection_names() if n.startswith("harness_verify_scratch_")]


def test_allow_writes_has_no_postgres_check():
    with pytest.raises(HarnessError, match="allow_writes: only \\[mongodb\\] has a write check"):
        workload_file.parse({"target": "local", "dataset": "accounts", "allow_writes": True,
                             "postgres": {"request": ["SELECT 1"]}}, "w")


# ------------------------------------------------------------------- what the statements reach (issue 69)

GUARDS_DB = "verify_guards"
# A schema of the user's own: functions that reach dblink_exec (an UPDATE on a connection of its own,
# which commits whatever verify's read-only transaction does) through one or two wrappers, PL/pgSQL,
# a view, an operator, a row-level policy, a dynamic EXECUTE, and a wrapper around pg_terminate_backend.
GUARDS_SCHEMA = """
CREATE EXTENSION IF NOT EXISTS dblink;
CREATE TABLE customers (id integer PRIMARY KEY, balance integer NOT NULL DEFAULT 0);
INSERT INTO customers (id) SELECT g FROM generate_series(1, 2000) g;
CREATE FUNCTION sneaky(cid integer) RETURNS text LANGUAGE sql AS
  $$ SELECT dblink_exec('{conn}', 'UPDATE customers SET balance = balance + 1 WHERE id <= ' || cid) $$;
CREATE FUNCTION sneaky_outer(cid integer) RETURNS text LANGUAGE sql AS $$ SELECT sneaky(cid) $$;
CREATE FUNCTION sneaky_pl(cid integer) RETURNS text LANGUAGE plpgsql AS
  $$ BEGIN RETURN sneaky_outer(cid); END $$;
CREATE VIEW sneaky_view AS SELECT id, sneaky(id) AS done FROM customers;
CREATE FUNCTION sneaky_dynamic(cid integer) RETURNS void LANGUAGE plpgsql AS $$
  BEGIN
    EXECUTE format('SELECT %s(%L, %L)', 'dblink' || '_exec', '{conn}',
                   'UPDATE customers SET balance = balance + 1 WHERE id <= ' || cid);
  END $$;
CREATE FUNCTION ends_sessions(cid integer) RETURNS boolean LANGUAGE sql AS
  $$ SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = cid $$;
CREATE FUNCTION sneaky_eq(integer, integer) RETURNS boolean LANGUAGE sql AS $$ SELECT sneaky($1) IS NOT NULL $$;
CREATE OPERATOR === (LEFTARG = integer, RIGHTARG = integer, FUNCTION = sneaky_eq);
CREATE TABLE guarded (id integer PRIMARY KEY);
ALTER TABLE guarded ENABLE ROW LEVEL SECURITY;
CREATE POLICY only_some ON guarded USING (sneaky(id) IS NOT NULL);
CREATE FUNCTION plain_abs(integer) RETURNS integer LANGUAGE internal IMMUTABLE AS 'int4abs';
CREATE FUNCTION balance_of(cid integer) RETURNS integer LANGUAGE plpgsql STABLE AS
  $$ DECLARE b integer; BEGIN SELECT balance INTO b FROM customers WHERE id = cid; RETURN b; END $$;
"""
# each workload statement, and the chain its refusal names
REACHED = {
    "sql wrapper": ("SELECT sneaky(:cid)", "public.sneaky → dblink_exec"),
    "plpgsql wrapper": ("SELECT sneaky_pl(:cid)",
                        "public.sneaky_pl → public.sneaky_outer → public.sneaky → dblink_exec"),
    "two-level wrapper": ("SELECT sneaky_outer(:cid)", "public.sneaky_outer → public.sneaky → dblink_exec"),
    "view over a wrapper": ("SELECT count(*) FROM sneaky_view WHERE id = :cid",
                            "public.sneaky_view → public.sneaky → dblink_exec"),
    "dynamic execute": ("SELECT sneaky_dynamic(:cid)", "public.sneaky_dynamic, which builds SQL at run time"),
    "terminate wrapper": ("SELECT ends_sessions(:cid)", "public.ends_sessions → pg_terminate_backend"),
    "operator over a wrapper": ("SELECT 1 WHERE :cid === 1", "public.sneaky_eq → public.sneaky → dblink_exec"),
    "row-level policy over a wrapper": ("SELECT count(*) FROM guarded WHERE id = :cid",
                                        "public.guarded (policy only_some) → public.sneaky → dblink_exec"),
}


@pytest.fixture(scope="module")
def guards_db(stack) -> str:
    """The user's own schema above, in a database of its own on the session's PostgreSQL; its DSN."""
    from urllib.parse import urlsplit

    import psycopg

    pg = urlsplit(stack.postgres_dsn)
    dsn = stack.postgres_dsn.rsplit("/", 1)[0] + f"/{GUARDS_DB}"
    with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {GUARDS_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {GUARDS_DB}")
    conn_str = f"host={pg.hostname} port={pg.port} dbname={GUARDS_DB} user=postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(GUARDS_SCHEMA.replace("{conn}", conn_str))
    return dsn


def _balances(dsn: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*), sum(balance) FROM customers").fetchone()


def _guards_workload(tmp_path: Path, dsn: str, statement: str, name: str = "w.toml") -> Path:
    return write(tmp_path, f'target = "{dsn}"\n[postgres]\nrequest = ["{statement}"]\n'
                           'params.cid = { int = [1, 2000] }\n[load]\nclients = 2\npools = [2]\n'
                           'models = ["threads_psycopg"]\nduration_s = 0.3\nwarmup_s = 0.1\nrepeats = 1\n', name)


@pytest.mark.parametrize("case", sorted(REACHED))
def test_a_call_reached_through_the_users_functions_is_refused_naming_the_chain(case, guards_db, tmp_path):
    statement, chain = REACHED[case]
    before = _balances(guards_db)
    with pytest.raises(HarnessError) as e:
        verify_mod.prepare(_guards_workload(tmp_path, guards_db, statement), data_dir=tmp_path / "data")
    message = str(e.value)
    assert f"postgres.request[0]: {chain}" in message and "\n" not in message, message
    assert _balances(guards_db) == before == (2000, 0)


def test_the_sneaky_workload_exits_non_zero_within_20_s_and_changes_no_row(guards_db, tmp_path):
    """Issue 69's workload through the command: before, it wrote 1,585 rows and exited 0."""
    import time

    path = _guards_workload(tmp_path, guards_db, REACHED["sql wrapper"][0])
    started = time.monotonic()
    out = harness("verify", str(path), "--data-dir", str(tmp_path / "data"), timeout=60)
    took = time.monotonic() - started
    assert out.returncode == 2 and "public.sneaky → dblink_exec" in out.stderr, out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert took < 20, took
    assert _balances(guards_db) == (2000, 0)
    assert not (tmp_path / "data" / "runs").exists() or not any((tmp_path / "data" / "runs").iterdir())


def test_a_trusted_function_that_writes_anyway_is_caught_by_the_row_counters(guards_db, tmp_path):
    """--trust-function lets the dynamic EXECUTE through the walk; on the study's own cluster the
    row counters are watched, so the pre-flight's write (dblink commits on its own connection, the
    rollback cannot undo it) stops the command, naming the table. Without the counters this
    workload would have exited 0."""
    path = _guards_workload(tmp_path, guards_db, "SELECT sneaky_dynamic(5)".replace("5", ":cid"))
    with pytest.raises(HarnessError, match=r"target: rows changed during the pre-flight: public\.customers "
                                           r"\(\+[\d,]+ updated\)"):
        verify_mod.prepare(path, data_dir=tmp_path / "data",
                           permissions=verify_mod.Permissions(trusted_functions=("sneaky_dynamic",)))
    import psycopg

    with psycopg.connect(guards_db, autocommit=True) as conn:   # undo what the trusted function did
        conn.execute("UPDATE customers SET balance = 0")


def test_what_the_walk_reads_and_what_it_cannot_are_both_named(guards_db):
    """A PL/pgSQL read and a view are walked; a function in another language is named as not
    checked; a trusted one is named and not walked. The role lines say what the role may write."""
    import psycopg

    from harness.experiments.verify import reach, rights

    with psycopg.connect(guards_db, autocommit=True) as conn:
        found = reach.check(conn, ["SELECT balance_of($1), plain_abs($1)", "SELECT count(*) FROM customers"],
                            ("sneaky_dynamic",))
        assert found.walked == {"public.balance_of"} and found.not_checked == {"public.plain_abs (internal)"}
        found = reach.check(conn, ["SELECT sneaky_dynamic($1)"], ("sneaky_dynamic",))
        assert found.trusted == {"public.sneaky_dynamic"} and not found.walked
        role = rights.read(conn, guards_db)
    assert role.superuser and role.can_write and role.study_cluster
    assert "dblink_exec" in role.runs_sql_elsewhere
    assert role.lines()[0].startswith("role postgres on database verify_guards (the study's own cluster): a superuser")
