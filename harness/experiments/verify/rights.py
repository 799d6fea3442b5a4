"""The role `harness verify` connects as, what it may write, and whether any row changed.

The read-only transaction, the refused names and the walk of what a statement reaches
(`harness.experiments.verify.reach`) keep a verify run from writing through what it sends. The
guarantee on a production server is a role that can only read: this module reads the role's rights
from the catalog and shows them first in the report, and refuses a role that can write on any
target that is not one of the study's own clusters, unless the user says so (`--writable-role-ok`).

The study's own cluster: the target `local`, or a loopback target whose backend process runs here in a
cluster the harness made (`harness.core.servers.study_cluster`). Loopback alone is not enough: a tunnel
to a production server looks like loopback.

A backstop for what the checks miss: on the study's own cluster, or a target the user says is idle
(`--idle-target`), the rows inserted, updated and deleted in each table of the target database
(`pg_stat_user_tables`, read after `pg_stat_clear_snapshot()`) are compared before and after the
pre-flight and after each variant. A backend flushes its counters when it exits, or when it goes
idle at most once a second, so each reading waits FLUSH_WAIT_S after our own connections closed. A
change stops the run, naming the table. (Not counted: TRUNCATE, temporary tables, other databases.)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from ...core import servers
from ...core.errors import HarnessError
from ...core.workload_file import SESSION_FUNCTIONS, is_loopback, target_hosts

FLUSH_WAIT_S = 1.2    # PostgreSQL flushes an idle backend's statistics at most once a second
READ_ONLY_ROLE_ADVICE = ("connect as a role that can only read (CREATE ROLE verify_reader LOGIN PASSWORD '...' "
                         "IN ROLE pg_read_all_data), or pass --writable-role-ok")
ELSEWHERE_FUNCTIONS = sorted(n for n in SESSION_FUNCTIONS if n.startswith(("dblink", "pg_background")))

_RIGHTS_SQL = """
SELECT current_user, current_database(), r.rolsuper, r.rolbypassrls,
       CASE WHEN to_regrole('pg_write_all_data') IS NULL THEN false
            ELSE pg_has_role(current_user, 'pg_write_all_data', 'USAGE') END,
       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p', 'v', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
           AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp%%'
           AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')),
       (SELECT coalesce(array_agg(DISTINCT p.proname ORDER BY p.proname), '{}') FROM pg_proc p
         WHERE p.proname = ANY (%(elsewhere)s) AND has_function_privilege(p.oid, 'EXECUTE')),
       pg_backend_pid(), current_setting('track_counts')::bool
FROM pg_roles r WHERE r.rolname = current_user
"""
_ROW_CHANGES_SQL = """
SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables
WHERE schemaname NOT LIKE 'pg\\_temp%%'
"""


@dataclass(frozen=True)
class Rights:
    role: str
    database: str
    superuser: bool
    bypasses_row_security: bool
    writes_all_data: bool                 # a member of pg_write_all_data
    writable_tables: int                  # tables and views it may insert into, update, delete or truncate
    runs_sql_elsewhere: tuple[str, ...]   # dblink-like functions it may execute
    study_cluster: bool                   # one of the study's own clusters (never refused)
    counts_rows: bool                     # track_counts on: the row-change backstop can read anything

    @property
    def can_write(self) -> bool:
        return self.superuser or self.writes_all_data or self.writable_tables > 0

    def lines(self) -> list[str]:
        """The report's first lines: who verify connected as and what that role may do."""
        if self.superuser:
            writes = "a superuser: it can write anything"
        elif self.can_write:
            writes = (f"can write {self.writable_tables} tables or views"
                      + (" (pg_write_all_data)" if self.writes_all_data else ""))
        else:
            writes = "can write no table: reads only"
        where = "the study's own cluster" if self.study_cluster else "not the study's own cluster"
        out = [f"role {self.role} on database {self.database} ({where}): {writes}"]
        if self.runs_sql_elsewhere:
            out.append(f"role {self.role} may execute {', '.join(self.runs_sql_elsewhere)} (SQL on another "
                       "connection; refused wherever a statement reaches it)")
        return out

    def as_note(self) -> dict[str, Any]:
        return {**asdict(self), "can_write": self.can_write, "lines": self.lines()}


def read(conn: Any, dsn: str, *, own: bool = False) -> Rights:
    """The rights of the role behind `conn` (psycopg, connected to `dsn`); `own` when the harness
    provisioned the server itself (the target `local`, a server the run started)."""
    row = conn.execute(_RIGHTS_SQL, {"elsewhere": ELSEWHERE_FUNCTIONS}).fetchone()
    if row is None:
        raise HarnessError("target: the role verify connected as is not in pg_roles")
    role, database, superuser, bypass, write_all, tables, elsewhere, backend_pid, counts = row
    hosts = target_hosts(dsn)
    local_cluster = bool(hosts) and all(is_loopback(h) for h in hosts) and servers.study_cluster(backend_pid)
    return Rights(role, database, bool(superuser), bool(bypass), bool(write_all), int(tables),
                  tuple(elsewhere), own or local_cluster, bool(counts))


def check(rights: Rights, writable_role_ok: bool) -> None:
    """Refuse a role that can write on a target that is not the study's own cluster."""
    if rights.study_cluster or writable_role_ok or not rights.can_write:
        return
    what = "is a superuser" if rights.superuser else f"can write {rights.writable_tables} tables or views"
    raise HarnessError(f"target: role {rights.role} {what} of database {rights.database}; a verify run needs only "
                       f"reads: {READ_ONLY_ROLE_ADVICE}")


def row_changes(conn: Any) -> dict[str, tuple[int, int, int]]:
    """Rows inserted, updated and deleted so far in each table of the target database, as the
    statistics show them once every backend that closed has flushed its own."""
    time.sleep(FLUSH_WAIT_S)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {name: (int(i), int(u), int(d)) for name, i, u, d in conn.execute(_ROW_CHANGES_SQL).fetchall()}


def compare(before: dict[str, tuple[int, int, int]], after: dict[str, tuple[int, int, int]], when: str) -> None:
    """A HarnessError naming the tables whose rows changed between two `row_changes` readings."""
    changed = []
    for table, counts in sorted(after.items()):
        was = before.get(table, (0, 0, 0))
        delta = [n - w for n, w in zip(counts, was)]
        if any(delta):
            changed.append(f"{table} (" + ", ".join(f"{d:+,} {verb}" for d, verb in
                                                   zip(delta, ("inserted", "updated", "deleted")) if d) + ")")
    if changed:
        raise HarnessError(f"target: rows changed {when}: {'; '.join(changed[:3])}"
                           + (f" and {len(changed) - 3} more tables" if len(changed) > 3 else "")
                           + "; stopping (verify sends reads only)")
