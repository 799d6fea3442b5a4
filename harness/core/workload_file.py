"""A user's workload file (TOML) for `harness verify`: the target, the queries, the load.

The file is checked against a schema (pydantic models with unknown keys forbidden) before anything
connects anywhere; every problem is one `HarnessError` line naming the key, e.g.
`workload.toml: load.pools: Input should be greater than 0`.

    target = "local"                 # or a postgresql:// DSN, or a mongodb:// URI
    dataset = "accounts"             # local only: the study's dataset to load (accounts | orders)

    [postgres]                       # one request = these statements, in order, on one connection
    request = ["SELECT owner, balance FROM acct WHERE id = :id",
               "SELECT count(*) FROM acct WHERE id BETWEEN :id AND :id + 50"]
    params.id = { int = [1, 99999] }     # or { choice = [...] }, or { column = "acct.id" }

    [load]
    clients = 200
    pools = [20]

A placeholder is `:name` (pgbench's style; `::type` casts are left alone). Each request draws every
parameter once from a seeded generator, so two runs send the same requests:
- `{ int = [lo, hi] }`: a uniform integer, both ends included;
- `{ choice = [a, b, ...] }`: one of the values;
- `{ column = "table.column" }` (PostgreSQL) or `{ column = "field" }` (MongoDB): one of up to
  `sample` (default 1000) values read from the target before the load starts (a read).

For MongoDB the request is one query: `collection`, a `filter` in which a string ":name" stands for
a drawn parameter, and optional `projection`, `sort` and `limit` (find_one when the limit is 1 or
absent). `large_read` names a query returning many documents for the cursor-stall check.

Safety: nothing a PostgreSQL workload sends may write. Three guards, in order:
1. Here, before anything connects: each entry is one statement whose first word is SELECT, WITH,
   VALUES, TABLE or SHOW, and that calls none of `SESSION_FUNCTIONS` (functions whose effect a
   read-only transaction does not contain: they change the session, which outlives the
   transaction on a pooled connection, or another session, or the server, or run SQL on another
   connection). Either is refused by name, in one line.
2. The server, per transaction: every request runs in a transaction started READ ONLY by the
   driver (psycopg's `read_only`, asyncpg's `transaction(readonly=True)`), so a write hidden in a
   CTE or in a function fails there; once the transaction has taken its snapshot PostgreSQL refuses
   to make it read-write. The sessions' default (`default_transaction_read_only=on`) stays as well,
   but a default is not a guarantee (`set_config` can change it).
3. The pre-flight (`harness.experiments.verify.postgres.preflight`): each statement runs once with
   drawn parameters in a read-only transaction that is rolled back, before any load; a refusal
   stops the command in one line naming the statement.
A role with SELECT privileges only is the guarantee a production server should add (README).

A MongoDB workload can express a `find` only (a filter, projection, sort and limit): no
aggregation pipeline, so no `$out` or `$merge`, and a top-level operator other than $and, $or and
$nor is refused. `allow_writes = true` enables the write check (bulk inserts), which only ever
writes to a scratch collection the run creates and drops. Durations, concurrency and repeats are
capped (`CAPS`); `load.max_error_rate` stops a repeat whose variant fails more often.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import HarnessError
from .redact import redact

# The bounds of a run a workload file may ask for: `harness verify` is pointed at real servers.
CAPS = {"clients": 1000, "tasks": 1000, "pool": 500, "duration_s": 60.0, "repeats": 20, "threads": 500}
DATASETS = ("accounts", "orders")
BODY_ONLY = "(the target given to harness verify)"   # a stored body has no target: it is checked without one
READ_WORDS = ("select", "with", "values", "table", "show")
PLACEHOLDER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_COMMENT = re.compile(r"^\s*(--[^\n]*\n|/\*.*?\*/)", re.S)

# Functions whose effect a read-only transaction does not contain, each refused by name (guard 1
# above; the read-only transaction is guard 2). One reason per group.
_SESSION_FUNCTION_GROUPS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("set_config",), "changes a setting of the session, which outlives the transaction on a pooled "
                      "connection (it can turn the session's default back to read-write)"),
    (("pg_terminate_backend",), "ends another session"),
    (("pg_cancel_backend",), "cancels another session's query"),
    (("pg_reload_conf",), "makes the server reload its configuration"),
    (("pg_rotate_logfile", "pg_rotate_logfile_old"), "rotates the server's log file"),
    (("pg_switch_wal", "pg_create_restore_point", "pg_backup_start", "pg_backup_stop", "pg_start_backup",
      "pg_stop_backup", "pg_promote", "pg_wal_replay_pause", "pg_wal_replay_resume"),
     "acts on the server's write-ahead log, backups or replication"),
    (("pg_create_physical_replication_slot", "pg_create_logical_replication_slot", "pg_drop_replication_slot",
      "pg_copy_physical_replication_slot", "pg_copy_logical_replication_slot", "pg_replication_slot_advance",
      "pg_logical_slot_get_changes", "pg_logical_slot_get_binary_changes", "pg_logical_emit_message"),
     "changes a replication slot or writes to the write-ahead log"),
    (("pg_stat_reset", "pg_stat_reset_shared", "pg_stat_reset_single_table_counters",
      "pg_stat_reset_single_function_counters", "pg_stat_reset_slru", "pg_stat_reset_replication_slot",
      "pg_stat_reset_subscription_stats"), "resets the server's statistics"),
    (("pg_log_backend_memory_contexts",), "makes another session write to the server's log"),
    (("pg_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
      "pg_advisory_xact_lock", "pg_advisory_xact_lock_shared", "pg_try_advisory_xact_lock",
      "pg_try_advisory_xact_lock_shared", "pg_advisory_unlock", "pg_advisory_unlock_shared",
      "pg_advisory_unlock_all"), "takes or releases an advisory lock other sessions wait on"),
    (("pg_notify",), "sends a notification to other sessions"),
    (("dblink", "dblink_exec", "dblink_connect", "dblink_connect_u", "dblink_open", "dblink_fetch",
      "dblink_send_query", "dblink_get_result"), "runs SQL on another connection, outside this read-only "
                                                 "transaction"),
    (("lo_import", "lo_export", "lo_create", "lo_creat", "lo_unlink", "lo_put", "lo_from_bytea", "lo_open",
      "lowrite", "lo_truncate", "lo_truncate64"), "reads or writes server files or large objects"),
    (("pg_file_write", "pg_file_rename", "pg_file_unlink", "pg_file_sync"), "writes server files"),
    (("nextval", "setval"), "advances or sets a sequence"),
    (("pg_background_launch", "pg_background_result", "pg_background_detach", "pg_background_submit"),
     "runs SQL in a background worker, outside this read-only transaction"),
)
SESSION_FUNCTIONS: dict[str, str] = {name: why for names, why in _SESSION_FUNCTION_GROUPS for name in names}
# A call, schema-qualified or quoted or not: `set_config(`, `pg_catalog.set_config (`, `"set_config"(`.
# The whole text is searched, literals and comments too: a name inside a string that is run as SQL
# (query_to_xml) is refused as well; a false alarm costs a rewording, a miss could cost a write.
SESSION_CALL = re.compile(r'(?<![\w$])"?(' + "|".join(sorted(SESSION_FUNCTIONS, key=len, reverse=True))
                           + r')"?\s*\(', re.I)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntRange(_Strict):
    int: tuple[int, int]

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.int[0] > self.int[1]:
            raise ValueError(f"int range [{self.int[0]}, {self.int[1]}] is empty (low > high)")
        return self


class Choice(_Strict):
    choice: list[Any] = Field(min_length=1)


class ColumnSample(_Strict):
    column: str = Field(min_length=1)
    sample: int = Field(default=1000, gt=0, le=100_000)


Generator = IntRange | Choice | ColumnSample


class Load(_Strict):
    clients: int = Field(default=200, gt=0, le=CAPS["clients"])       # PostgreSQL: closed-loop clients
    tasks: int = Field(default=200, gt=0, le=CAPS["tasks"])           # MongoDB: async tasks
    threads: int = Field(default=32, gt=0, le=CAPS["threads"])        # MongoDB: the threads model
    pools: list[Annotated[int, Field(gt=0, le=CAPS["pool"])]] = Field(default=[20], min_length=1)
    duration_s: float = Field(default=3.0, gt=0, le=CAPS["duration_s"])
    warmup_s: float = Field(default=1.0, ge=0, le=CAPS["duration_s"])
    repeats: int = Field(default=5, gt=0, le=CAPS["repeats"])
    p99_objective_ms: float | None = Field(default=None, gt=0)        # the service's latency objective
    production_pool: int | None = Field(default=None, gt=0)           # the pool size production runs
    max_error_rate: float = Field(default=0.05, ge=0, le=1)           # a variant past it stops the repeat
    models: list[Literal["threads_psycopg", "asyncio_psycopg", "asyncio_asyncpg", "uvloop_asyncpg",
                         "uvloop_psycopg"]] = Field(
        default=["threads_psycopg", "asyncio_psycopg", "asyncio_asyncpg", "uvloop_asyncpg"], min_length=1)


class Postgres(_Strict):
    request: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    params: dict[str, Generator] = {}


class LargeRead(_Strict):
    collection: str | None = None                                      # default: the query's collection
    filter: dict[str, Any] = {}
    batch_sizes: list[Annotated[int, Field(gt=0)]] = Field(default=[100, 1000], min_length=1)
    default_batching: bool = True
    stall_limit_ms: float = Field(default=10.0, gt=0)                  # the seed's "below 10 ms"


class Mongo(_Strict):
    database: str | None = None                                        # default: the URI's, else "study"
    collection: str = Field(min_length=1)
    filter: dict[str, Any]
    params: dict[str, Generator] = {}
    projection: dict[str, Any] | None = None
    sort: dict[str, Literal[1, -1]] | None = None
    limit: int | None = Field(default=None, gt=0, le=10_000)
    large_read: LargeRead | None = None


class Workload(_Strict):
    target: str = Field(min_length=1)
    dataset: Literal["accounts", "orders"] | None = None
    postgres: Postgres | None = None
    mongodb: Mongo | None = None
    load: Load = Load()
    allow_writes: bool = False
    seed: int = 1

    @model_validator(mode="after")
    def _one_family(self) -> Workload:
        if (self.postgres is None) == (self.mongodb is None):
            raise ValueError("give exactly one of [postgres] and [mongodb]")
        if self.target == "local" and self.dataset is None:
            raise ValueError("target = \"local\" needs dataset = \"accounts\" (PostgreSQL) or \"orders\" (MongoDB)")
        if self.allow_writes and self.postgres is not None:
            raise ValueError("allow_writes: only [mongodb] has a write check (seed 001's bulk writes); "
                             "seed 002 has none")
        if self.target != "local" and self.dataset is not None:
            raise ValueError("dataset is for target = \"local\" only: the harness never loads data into your server")
        return self

    @property
    def family(self) -> str:
        return "postgres" if self.postgres is not None else "mongodb"

    @property
    def experiment(self) -> str:
        return "verify_postgres" if self.postgres is not None else "verify_mongo"

    def body(self) -> dict[str, Any]:
        """The workload without its target: what the run's parameters hold (no credentials)."""
        return self.model_dump(exclude={"target"}, mode="json")


def _key(loc: tuple) -> str:
    return ".".join(str(x) for x in loc if not (isinstance(x, str) and x in ("IntRange", "Choice", "ColumnSample"))
                    and not str(x).startswith("function-")) or "(top level)"


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    return f"{_key(tuple(err['loc']))}: {msg}"


def parse(data: dict[str, Any], source: str = "workload") -> Workload:
    """A validated Workload from parsed TOML (or JSON) data; HarnessError naming the key otherwise."""
    try:
        w = Workload.model_validate(data)
    except ValidationError as e:
        raise HarnessError(f"{source}: {_first_error(e)}") from None
    _check_queries(w, source)
    _check_target(w, source)
    return w


def load(path: str | Path) -> Workload:
    """Read and check a workload file. One-line HarnessError for a missing file, bad TOML or a
    value off the schema."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise HarnessError(f"{p}: cannot read the workload file ({e.strerror or type(e).__name__})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise HarnessError(f"{p}: not valid TOML ({e})") from None
    return parse(data, str(p))


def body_json(path: str | Path) -> str:
    """A workload file's body as the verify experiments store it (sorted JSON, no target)."""
    return json.dumps(load(path).body(), sort_keys=True)


def from_json(text: str, source: str = "parameter workload") -> dict[str, Any]:
    """The body stored in a verify experiment's parameters, checked again (it may come from `--set`)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise HarnessError(f"{source}: not valid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{source}: expected a JSON object")
    return parse({"target": "local" if data.get("dataset") else BODY_ONLY, **data}, source).body()


# -- statements ---------------------------------------------------------------------------------------

def first_word(sql: str) -> str:
    s = sql
    while (m := _COMMENT.match(s)) is not None:
        s = s[m.end():]
    word = re.match(r"\s*([A-Za-z]+)", s)
    return word.group(1).lower() if word else ""


def check_read_only(sql: str, where: str) -> None:
    """One read statement calling none of `SESSION_FUNCTIONS`, or a HarnessError naming `where` and
    what the statement is or calls."""
    body = sql.strip().rstrip(";")
    if ";" in re.sub(r"'[^']*'", "", body):
        raise HarnessError(f"{where}: one statement per entry (found ';' inside)")
    word = first_word(body)
    if not word:
        raise HarnessError(f"{where}: malformed statement (no SQL keyword): {body[:60]!r}")
    if word not in READ_WORDS:
        raise HarnessError(f"{where}: {word.upper()} is not a read; only {', '.join(w.upper() for w in READ_WORDS)} "
                           "statements run (allow_writes enables only the scratch-table write check)")
    call = SESSION_CALL.search(body)
    if call is not None:
        name = call.group(1).lower()
        raise HarnessError(f"{where}: calls {name}(), which {SESSION_FUNCTIONS[name]}; a verify run does not "
                           "send it")


def placeholders(sql: str) -> list[str]:
    return PLACEHOLDER.findall(sql)


def to_psycopg(sql: str) -> str:
    """`:name` -> `%(name)s`, with a literal `%` doubled (psycopg's named placeholders)."""
    return PLACEHOLDER.sub(lambda m: f"%({m.group(1)})s", sql.replace("%", "%%"))


def to_asyncpg(sql: str) -> tuple[str, list[str]]:
    """`:name` -> `$n` (asyncpg's positional placeholders) and the names in `$n` order."""
    order: list[str] = []

    def sub(m: re.Match) -> str:
        if m.group(1) not in order:
            order.append(m.group(1))
        return f"${order.index(m.group(1)) + 1}"

    return PLACEHOLDER.sub(sub, sql), order


def mongo_placeholders(value: Any) -> list[str]:
    """The `:name` strings of a filter template, at any depth."""
    if isinstance(value, str):
        m = re.fullmatch(r":([A-Za-z_]\w*)", value)
        return [m.group(1)] if m else []
    if isinstance(value, dict):
        return [n for v in value.values() for n in mongo_placeholders(v)]
    if isinstance(value, list):
        return [n for v in value for n in mongo_placeholders(v)]
    return []


def draw(params: dict[str, Any], rng: Any) -> dict[str, Any]:
    """One operation's parameter values from resolved generators ({"int": [lo, hi]} or
    {"choice": [...]}), drawn from `rng` (a seeded random.Random) in a fixed order."""
    return {name: (rng.randint(*g["int"]) if "int" in g else rng.choice(g["choice"]))
            for name, g in sorted(params.items())}


def fill(template: Any, values: dict[str, Any]) -> Any:
    """A filter template with every ":name" string replaced by its drawn value."""
    if isinstance(template, str):
        m = re.fullmatch(r":([A-Za-z_]\w*)", template)
        return values[m.group(1)] if m else template
    if isinstance(template, dict):
        return {k: fill(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, values) for v in template]
    return template


def _check_queries(w: Workload, source: str) -> None:
    if w.postgres is not None:
        used: set[str] = set()
        for k, sql in enumerate(w.postgres.request):
            where = f"{source}: postgres.request[{k}]"
            check_read_only(sql, where)
            used.update(placeholders(sql))
        params, where = w.postgres.params, "postgres.params"
    else:
        assert w.mongodb is not None
        if any(str(k).startswith("$") and k not in ("$and", "$or", "$nor") for k in w.mongodb.filter):
            raise HarnessError(f"{source}: mongodb.filter: only query operators are allowed at the top level")
        used = set(mongo_placeholders(w.mongodb.filter))
        params, where = w.mongodb.params, "mongodb.params"
    missing = sorted(used - set(params))
    if missing:
        raise HarnessError(f"{source}: {where}: no generator for placeholder :{missing[0]}")
    unused = sorted(set(params) - used)
    if unused:
        raise HarnessError(f"{source}: {where}.{unused[0]}: not used by any placeholder")
    if w.postgres is not None:
        for name, gen in params.items():
            if isinstance(gen, ColumnSample) and not re.fullmatch(r"\w+\.\w+", gen.column):
                raise HarnessError(f"{source}: {where}.{name}.column: expected \"table.column\", got {gen.column!r}")


# -- the target -----------------------------------------------------------------------------------------

def _check_target(w: Workload, source: str) -> None:
    if w.target in ("local", BODY_ONLY):
        return
    scheme = urlsplit(w.target).scheme
    want = ("postgresql", "postgres") if w.family == "postgres" else ("mongodb", "mongodb+srv")
    if scheme not in want:
        raise HarnessError(f"{source}: target: expected \"local\" or a {want[0]}:// URI for "
                           f"[{w.family}], got {redact(w.target)!r}")


def target_hosts(target: str) -> list[str]:
    """The host names of a DSN or URI (several for a MongoDB seed list); [] for `local`."""
    if target == "local":
        return []
    netloc = urlsplit(target).netloc.rsplit("@", 1)[-1]
    hosts = []
    for part in netloc.split(","):
        host = part.strip()
        if host.startswith("["):
            host = host[1:host.index("]")]
        else:
            host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        hosts.append(host or "localhost")
    return hosts


def is_loopback(host: str) -> bool:
    """True when every address `host` resolves to is a loopback address (127/8, ::1). A name that
    does not resolve is not loopback (the connection check reports it)."""
    try:
        addresses = {a[4][0] for a in socket.getaddrinfo(host, None)}
    except (socket.gaierror, UnicodeError):
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def confirm_target(w: Workload, confirmed_hosts: tuple[str, ...], source: str) -> None:
    """A target off loopback runs only when every such host is named with --confirm-host."""
    for host in target_hosts(w.target):
        if not is_loopback(host) and host not in confirmed_hosts:
            raise HarnessError(f"{source}: target host {host} is not on loopback; to aim this load at it, "
                               f"pass --confirm-host {host}")


def check_error_rate(variant: str, ok: int, errors: int, limit: float, first_error: str = "") -> None:
    """The bounded-load rule: a variant with no successful operation, or whose failed share passes
    `load.max_error_rate`, stops the repeat (HarnessError with the first error the server gave)."""
    done = ok + errors
    if ok and errors / done <= limit:
        return
    share = f"{errors / done:.0%} of {done} operations failed" if done else "no operation completed"
    raise HarnessError(f"{variant}: {share}, past load.max_error_rate {limit:.0%}; stopping"
                       + (f" ({first_error})" if first_error else ""))


def check_caps(params: Any, names: tuple[str, ...]) -> None:
    """A verify experiment's parameters within CAPS (they may come from `--set`, not a file)."""
    for name in names:
        value, cap = getattr(params, name), CAPS["pool" if name == "pools" else name]
        for v in value if isinstance(value, tuple) else (value,):
            if v > cap:
                raise HarnessError(f"parameter {name} must be at most {cap:g} (harness verify's bound), got {v!r}")
