"""What a PostgreSQL workload's statements reach, walked from the target's catalog before anything runs.

The statement's own text is checked before anything connects (`harness.core.workload_file`: read
words only, none of `SESSION_FUNCTIONS` called). A function of the user's schema can still call one
of them: `SELECT sneaky(:id)`, where `sneaky` calls `dblink_exec(..., 'UPDATE ...')`, writes through a
connection of its own that no READ ONLY transaction of ours contains. So, before the pre-flight runs
any statement, this module resolves from the catalog every function and view a statement reaches
and walks their bodies, with PostgreSQL's own parser (pglast), never planning a statement (planning
can evaluate functions, so no EXPLAIN):

- a statement, a SQL function's body, a view's definition, a row-level security policy of a table
  read: every function called, operator used (its function), type cast to (its cast function) and
  relation read (a view is walked, a table's policies are);
- a PL/pgSQL body: every SQL statement and expression in it, the same way; a statement built at run
  time (EXECUTE, RETURN QUERY EXECUTE, FOR ... IN EXECUTE, OPEN ... FOR EXECUTE) cannot be checked
  and is refused, unless the user names the function with --trust-function;
- a function of `pg_catalog` runs as shipped: only its name is checked (a `SESSION_FUNCTIONS` name,
  or `pg_background_*`), and those that run SQL given as text (`query_to_xml`, `ts_stat`, ...) have a
  literal argument walked as SQL and any other refused;
- a function outside `pg_catalog` in another language (C, PL/Python, ...) has a body that cannot be
  read: it is named in the report as not checked, not refused (an extension's C functions are
  ordinary reads as often as not).

A name is resolved as the target resolves it: a qualified name in its schema, an unqualified one in
every schema of the session's search path (every overload: which one runs is the planner's choice,
so all are walked). The walk is bounded (`MAX_DEPTH` calls deep, `MAX_OBJECTS` objects): past the
bound the statement is refused, not passed. Each body's text is also searched for a refused name by
the same pattern as the statement's (a name in a literal is run as SQL by some functions): a false
alarm costs a rewording, a miss could cost a write.

A refusal is one HarnessError line naming the chain: `postgres.request[0]: public.sneaky →
public.dblink_exec, which runs SQL on another connection, ...`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pglast import parser
from pglast.parser import ParseError

from ...core.errors import HarnessError
from ...core.workload_file import SESSION_CALL, SESSION_FUNCTIONS, to_asyncpg

MAX_DEPTH = 12        # calls deep from a statement
MAX_OBJECTS = 2000    # functions, views and policies walked for one workload
REFUSED_PREFIXES = {"pg_background": "runs SQL in a background worker, outside this read-only transaction"}
# pg_catalog functions that run SQL given as text: a literal is walked, anything else refused
SQL_TEXT_FUNCTIONS = {"query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "ts_stat"}
# pg_catalog functions that read a relation, schema or database named at run time: not checkable
NAMED_AT_RUN_TIME = {"table_to_xml", "table_to_xmlschema", "table_to_xml_and_xmlschema", "schema_to_xml",
                     "schema_to_xmlschema", "schema_to_xml_and_xmlschema", "database_to_xml",
                     "database_to_xmlschema", "database_to_xml_and_xmlschema", "cursor_to_xml",
                     "cursor_to_xmlschema"}
READABLE_LANGUAGES = ("sql", "plpgsql")
DYNAMIC_PLPGSQL = ("PLpgSQL_stmt_dynexecute", "PLpgSQL_stmt_dynfors", "dynquery")
# PostgreSQL's RawParseMode for a PL/pgSQL expression: 0 a statement, 2 an expression, 3-5 `target := expr`
_PARSE_EXPRESSION, _PARSE_ASSIGN = 2, (3, 4, 5)

_FUNCTIONS_SQL = """
SELECT p.oid, n.nspname, p.proname, l.lanname, p.prokind, p.prosrc, p.prosqlbody IS NOT NULL
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
WHERE p.proname = %(name)s
  AND CASE WHEN %(schema)s::text IS NULL THEN n.nspname = ANY (current_schemas(true)) ELSE n.nspname = %(schema)s END
"""
_FUNCTION_BY_OID_SQL = """
SELECT p.oid, n.nspname, p.proname, l.lanname, p.prokind, p.prosrc, p.prosqlbody IS NOT NULL
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
WHERE p.oid = %s
"""
_AGGREGATE_PARTS_SQL = """
SELECT unnest(ARRAY[aggtransfn, aggfinalfn, aggcombinefn, aggserialfn, aggdeserialfn, aggmtransfn,
                    aggminvtransfn, aggmfinalfn]::oid[]) FROM pg_aggregate WHERE aggfnoid = %s
"""
_OPERATORS_SQL = """
SELECT DISTINCT o.oprcode::oid FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
WHERE o.oprname = %(name)s AND o.oprcode <> 0
  AND CASE WHEN %(schema)s::text IS NULL THEN n.nspname = ANY (current_schemas(true)) ELSE n.nspname = %(schema)s END
"""
_CASTS_SQL = """
SELECT c.castfunc FROM pg_cast c JOIN pg_type t ON t.oid = c.casttarget JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE c.castfunc <> 0 AND t.typname = %(name)s
  AND CASE WHEN %(schema)s::text IS NULL THEN n.nspname = ANY (current_schemas(true)) ELSE n.nspname = %(schema)s END
"""
_RELATION_SQL = """
SELECT c.oid, n.nspname, c.relname, c.relkind, CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = %(name)s
  AND CASE WHEN %(schema)s::text IS NULL THEN n.nspname = ANY (current_schemas(true)) ELSE n.nspname = %(schema)s END
"""
_POLICIES_SQL = """
SELECT polname, pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid) FROM pg_policy WHERE polrelid = %s
"""


@dataclass
class Reach:
    """What the walk found: the user's functions and views whose bodies it read, the functions it
    could not read (another language), and the trusted ones it did not walk."""
    walked: set[str] = field(default_factory=set)
    not_checked: set[str] = field(default_factory=set)
    trusted: set[str] = field(default_factory=set)

    def as_note(self) -> dict[str, list[str]]:
        return {"walked": sorted(self.walked), "not_checked": sorted(self.not_checked),
                "trusted": sorted(self.trusted)}


class _Refused(Exception):
    def __init__(self, chain: tuple[str, ...], why: str) -> None:
        super().__init__(why)
        self.chain, self.why = chain, why


def refused_reason(name: str) -> str | None:
    """Why a function of this name is never sent, or None."""
    name = name.lower()
    if name in SESSION_FUNCTIONS:
        return SESSION_FUNCTIONS[name]
    return next((why for prefix, why in REFUSED_PREFIXES.items() if name.startswith(prefix)), None)


def _names(nodes: list[dict]) -> tuple[str | None, str]:
    """(schema or None, name) of a parse tree's name list (`[{"String": {"sval": ...}}, ...]`)."""
    parts = [n["String"]["sval"] for n in nodes if "String" in n]
    return (parts[-2] if len(parts) > 1 else None), parts[-1]


def _walk_tree(node: Any, found: dict[str, list]) -> None:
    """Every call, operator, cast and relation a parse tree (pglast's JSON) names."""
    if isinstance(node, list):
        for n in node:
            _walk_tree(n, found)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "FuncCall":
            found["calls"].append((_names(value["funcname"]), value.get("args", [])))
        elif key == "A_Expr" and value.get("kind", "AEXPR_OP").startswith("AEXPR_OP") and "name" in value:
            found["operators"].append(_names(value["name"]))
        elif key == "TypeCast":
            found["casts"].append(_names(value["typeName"]["names"]))
        elif key == "RangeVar":
            found["relations"].append((value.get("schemaname"), value["relname"]))
        _walk_tree(value, found)


def parse(sql: str) -> dict[str, list]:
    """The calls, operators, casts and relations of SQL text (one or more statements)."""
    found: dict[str, list] = {"calls": [], "operators": [], "casts": [], "relations": []}
    _walk_tree(json.loads(parser.parse_sql_json(sql)), found)
    return found


def plpgsql_queries(definition: str) -> tuple[list[str], bool]:
    """The SQL of every statement and expression of a PL/pgSQL function (`pg_get_functiondef`), as
    statements, and whether it builds any at run time."""
    queries: list[str] = []
    dynamic = False

    def visit(node: Any) -> None:
        nonlocal dynamic
        if isinstance(node, list):
            for n in node:
                visit(n)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in DYNAMIC_PLPGSQL:
                    dynamic = True
                if key == "PLpgSQL_expr":
                    queries.append(_as_statement(value["query"], value.get("parseMode", 0)))
                visit(value)

    visit(json.loads(parser.parse_plpgsql_json(definition)))
    return queries, dynamic


def _as_statement(query: str, mode: int) -> str:
    if mode == _PARSE_EXPRESSION:
        return f"SELECT {query}"
    if mode in _PARSE_ASSIGN:
        return "SELECT " + query.split(":=", 1)[1] if ":=" in query else "SELECT " + query.split("=", 1)[-1]
    return query


class _Walker:
    def __init__(self, conn: Any, trusted: set[str]) -> None:
        self.conn, self.trusted = conn, {t.lower() for t in trusted}
        self.reach = Reach()
        self.seen: set[tuple[str, int]] = set()

    def _rows(self, sql: str, params: Any) -> list[tuple]:
        return self.conn.execute(sql, params).fetchall()

    def _visit(self, kind: str, oid: int, chain: tuple[str, ...]) -> bool:
        """False when already walked; refuses past the bounds."""
        if (kind, oid) in self.seen:
            return False
        if len(chain) > MAX_DEPTH or len(self.seen) >= MAX_OBJECTS:
            raise _Refused(chain, f"reaches further than the check walks ({MAX_DEPTH} calls deep, "
                                  f"{MAX_OBJECTS} objects); it cannot be checked")
        self.seen.add((kind, oid))
        return True

    def sql(self, text: str, chain: tuple[str, ...]) -> None:
        call = SESSION_CALL.search(text)
        if call is not None and chain:
            raise _Refused((*chain, call.group(1).lower()), SESSION_FUNCTIONS[call.group(1).lower()])
        try:
            found = parse(text)
        except ParseError as e:   # a body PostgreSQL's own parser refuses
            raise _Refused(chain, f"has SQL the check cannot parse ({str(e)[:120]})") from None
        for (schema, name), args in found["calls"]:
            for row in self._rows(_FUNCTIONS_SQL, {"schema": schema, "name": name}):
                self.function(row, chain, args)
        for schema, name in found["operators"]:
            for (oid,) in self._rows(_OPERATORS_SQL, {"schema": schema, "name": name}):
                self.function_oid(oid, chain)
        for schema, name in found["casts"]:
            for (oid,) in self._rows(_CASTS_SQL, {"schema": schema, "name": name}):
                self.function_oid(oid, chain)
        for schema, name in found["relations"]:
            for row in self._rows(_RELATION_SQL, {"schema": schema, "name": name}):
                self.relation(row, chain)

    def function_oid(self, oid: int, chain: tuple[str, ...]) -> None:
        for row in self._rows(_FUNCTION_BY_OID_SQL, (oid,)):
            self.function(row, chain, [])

    def function(self, row: tuple, chain: tuple[str, ...], args: list) -> None:
        oid, schema, name, language, kind, source, atomic = row
        label = name if schema == "pg_catalog" else f"{schema}.{name}"
        here = (*chain, label)
        why = refused_reason(name)
        if why is not None:
            raise _Refused(here, why)
        if schema == "pg_catalog":
            self._catalog_function(name, here, args)
            return
        if name.lower() in self.trusted or label.lower() in self.trusted:
            self.reach.trusted.add(label)
            return
        if not self._visit("function", oid, here):
            return
        if kind == "a":
            for (part,) in self._rows(_AGGREGATE_PARTS_SQL, (oid,)):
                if part:
                    self.function_oid(part, here)
        if language not in READABLE_LANGUAGES:
            self.reach.not_checked.add(f"{label} ({language})")
            return
        self.reach.walked.add(label)
        if language == "sql":
            body = (self._rows("SELECT pg_get_functiondef(%s)", (oid,))[0][0] if atomic else source)
            self.sql(body, here)
            return
        definition = self._rows("SELECT pg_get_functiondef(%s)", (oid,))[0][0]
        call = SESSION_CALL.search(source)
        if call is not None:
            raise _Refused((*here, call.group(1).lower()), SESSION_FUNCTIONS[call.group(1).lower()])
        try:
            queries, dynamic = plpgsql_queries(definition)
        except ParseError as e:
            raise _Refused(here, f"has PL/pgSQL the check cannot parse ({str(e)[:120]})") from None
        if dynamic:
            raise _Refused(here, "builds SQL at run time (EXECUTE), which cannot be checked; to run it anyway, "
                                 f"name it with --trust-function {name}")
        for q in queries:
            self.sql(q, here)

    def _catalog_function(self, name: str, here: tuple[str, ...], args: list) -> None:
        if name in NAMED_AT_RUN_TIME:
            raise _Refused(here, "reads a relation named at run time, which cannot be checked")
        if name in SQL_TEXT_FUNCTIONS:
            text = args[0].get("A_Const", {}).get("sval", {}).get("sval") if args else None
            if text is None:
                raise _Refused(here, "runs SQL given as text that is not a literal, which cannot be checked")
            self.sql(text, here)

    def relation(self, row: tuple, chain: tuple[str, ...]) -> None:
        oid, schema, name, kind, view_sql = row
        label = f"{schema}.{name}"
        if schema == "pg_catalog" or not self._visit("relation", oid, chain):
            return
        if kind == "v":
            self.reach.walked.add(label)
            self.sql(view_sql, (*chain, label))
        for policy, using, check in self._rows(_POLICIES_SQL, (oid,)):
            for expr in (using, check):
                if expr:
                    self.sql(f"SELECT {expr}", (*chain, f"{label} (policy {policy})"))


def check(conn: Any, request: list[str], trusted: tuple[str, ...] = ()) -> Reach:
    """Walk what each statement of `request` reaches on the target behind `conn` (a psycopg
    connection); raises a one-line HarnessError naming the statement and the chain that reaches a
    refused call, or a body that cannot be checked."""
    walker = _Walker(conn, set(trusted))
    for k, statement in enumerate(request):
        try:
            walker.sql(to_asyncpg(statement)[0], ())   # `:name` placeholders as `$n`, which the parser reads
        except _Refused as r:
            shown = f"{' → '.join(r.chain)}, which" if r.chain else "the statement"
            raise HarnessError(f"postgres.request[{k}]: {shown} {r.why}; a verify run does not send it") from None
    return walker.reach
