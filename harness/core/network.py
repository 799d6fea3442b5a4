"""The network path between the harness and its servers: direct, or through Toxiproxy with a delay.

On one machine a round trip to the database takes about 0.1 ms; the seeds' cloud databases took
milliseconds, and how many of those waits overlap is what sync and async apps differ in. `route()`
puts the delay back, as a real and recorded component:

    with network.route(stack, ("mongodb",), via_proxy=True, rtt_ms=25, jitter_ms=0) as r:
        run_experiment(r.stack)          # URIs now point at Toxiproxy's listeners
        manifest["network"] = r.record   # the setting and the added round trip actually measured

Per needed role, one Toxiproxy proxy (listening on 127.0.0.1, a free port) forwards to the real
server, with one latency toxic of `rtt_ms` (± `jitter_ms`) on its downstream (server -> client)
stream when `rtt_ms` > 0. Toxiproxy delays each chunk of bytes it reads, per direction, by the
latency measured from the moment it read that chunk: a request/response exchange pays the delay
once per round trip, and the chunks of one long response are delayed in a pipeline (each by
`rtt_ms` from its own arrival), not `rtt_ms` per chunk one after the other. With jitter every
chunk draws its own delay, and chunks never overtake each other. Connection set-up pays it once
per protocol round trip of the handshake (Toxiproxy accepts the TCP connection itself, so the TCP
handshake adds nothing).

`rtt_ms=0` through the proxy is valid: the fault tests need the proxy in place with no toxic
(`Route.disable()`, `Route.add_toxic("postgres", "reset_peer", {"timeout": 0})`, ...).
Toxiproxy is driven through its HTTP API (https://github.com/Shopify/toxiproxy#http-api) with httpx.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from . import servers
from .errors import HarnessError
from .redact import redact
from .servers import Server, ServerStack

ROUND_TRIPS = 50          # per path and role for the measured added delay (medians of each)
WARMUP_ROUND_TRIPS = 5    # connection set-up and first-use costs, excluded
DEFAULT_PORTS = {"mongodb": 27017, "postgres": 5432}
API_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_S = 10.0


def check_setting(via_proxy: bool, rtt_ms: float, jitter_ms: float) -> None:
    """Validate a network setting; each error names the parameter (used by `Params.validate`)."""
    for name, value in (("rtt_ms", rtt_ms), ("jitter_ms", jitter_ms)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise HarnessError(f"parameter {name} must be a number of milliseconds, got {value!r}")
        if value < 0:
            raise HarnessError(f"parameter {name} must be zero or more, got {value!r}")
        # Toxiproxy's latency toxic takes whole milliseconds: refuse rather than round silently.
        if float(value) != int(value):
            raise HarnessError(f"parameter {name} must be a whole number of milliseconds "
                               f"(Toxiproxy's latency toxic), got {value!r}")
        if value > 0 and not via_proxy:
            raise HarnessError(f"parameter {name}={value:g} needs via_proxy=on: the delay is added "
                               f"by the proxy (set via_proxy=on, or {name}=0)")
    if jitter_ms > rtt_ms:
        # Toxiproxy draws latency ± jitter; a negative draw is no delay, which skews the distribution.
        raise HarnessError(f"parameter jitter_ms ({jitter_ms:g}) must not exceed rtt_ms ({rtt_ms:g})")


# ----------------------------------------------------------------------------------------------
# Toxiproxy's HTTP API.


class Toxiproxy:
    """A thin client of Toxiproxy's HTTP API; every failure is a HarnessError naming the call."""

    def __init__(self, api_url: str):
        self.api_url = api_url.rstrip("/")
        self._http = httpx.Client(base_url=self.api_url, timeout=API_TIMEOUT_S)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            r = self._http.request(method, path, json=body)
        except httpx.HTTPError as e:
            raise HarnessError(f"Toxiproxy at {self.api_url} did not answer {method} {path}: "
                               f"{type(e).__name__}: {e}") from None
        if r.status_code >= 300:
            raise HarnessError(f"Toxiproxy {method} {path} failed ({r.status_code}): {r.text.strip()[:300]}")
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.text

    def version(self) -> str:
        return str(self._call("GET", "/version")).strip()

    def proxies(self) -> dict[str, dict]:
        return self._call("GET", "/proxies")

    def create_proxy(self, name: str, upstream: str, listen: str = "127.0.0.1:0") -> dict:
        return self._call("POST", "/proxies", {"name": name, "upstream": upstream, "listen": listen,
                                               "enabled": True})

    def update_proxy(self, name: str, **fields: Any) -> dict:
        return self._call("POST", f"/proxies/{name}", fields)

    def delete_proxy(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def toxics(self, proxy: str) -> list[dict]:
        return self._call("GET", f"/proxies/{proxy}/toxics")

    def add_toxic(self, proxy: str, type: str, attributes: dict[str, Any], *, stream: str = "downstream",
                  name: str | None = None, toxicity: float = 1.0) -> dict:
        if stream not in ("upstream", "downstream"):
            raise HarnessError(f"toxic stream must be upstream or downstream, got {stream!r}")
        body = {"type": type, "stream": stream, "toxicity": toxicity, "attributes": attributes}
        if name:
            body["name"] = name
        return self._call("POST", f"/proxies/{proxy}/toxics", body)

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")


# ----------------------------------------------------------------------------------------------
# Pointing a URI at a proxy listener (credentials and options kept).


def _split_hostport(hostport: str, default_port: int) -> tuple[str, int]:
    if hostport.startswith("["):                      # [::1]:5432
        host, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif hostport.count(":") == 1:
        host, port = hostport.split(":")
    else:
        host, port = hostport, ""
    if not host:
        raise ValueError("no host")
    return host, int(port) if port else default_port


def _upstream(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def mongodb_endpoint(uri: str) -> tuple[str, int]:
    parts = urlsplit(uri)
    if parts.scheme != "mongodb":
        raise HarnessError(f"via_proxy needs a mongodb:// URI with one host (a mongodb+srv:// URI "
                           f"resolves to several), got {redact(uri)}")
    hosts = parts.netloc.rpartition("@")[2]
    if "," in hosts:
        raise HarnessError(f"via_proxy needs a MongoDB URI with one host, got {redact(uri)}")
    try:
        return _split_hostport(hosts, DEFAULT_PORTS["mongodb"])
    except ValueError:
        raise HarnessError(f"cannot read host and port from the MongoDB URI {redact(uri)}") from None


def mongodb_via(uri: str, listen: str) -> str:
    parts = urlsplit(uri)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{listen}" if userinfo else listen
    # directConnection: a replica-set member would otherwise hand the driver its own address,
    # and the driver would go around the proxy.
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k.lower() not in ("directconnection", "replicaset")]
    query.append(("directConnection", "true"))
    return urlunsplit((parts.scheme, netloc, parts.path or "/", urlencode(query), parts.fragment))


def postgres_endpoint(dsn: str) -> tuple[str, int]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        d = conninfo_to_dict(dsn)
    except Exception as e:  # psycopg raises ProgrammingError for a DSN it cannot parse
        raise HarnessError(f"cannot parse the PostgreSQL DSN {redact(dsn)}: {e}") from None
    host = str(d.get("host") or "")
    if not host or host.startswith("/") or "," in host:
        raise HarnessError(f"via_proxy needs a PostgreSQL DSN with one TCP host (not a Unix socket), "
                           f"got {redact(dsn)}")
    port = str(d.get("port") or DEFAULT_PORTS["postgres"])
    if "," in port or not port.isdigit():
        raise HarnessError(f"via_proxy needs one port in the PostgreSQL DSN, got {redact(dsn)}")
    return host, int(port)


def postgres_via(dsn: str, listen: str) -> str:
    host, _, port = listen.rpartition(":")
    parts = urlsplit(dsn)
    if parts.scheme in ("postgresql", "postgres"):
        # Keep the URI form: asyncpg accepts only URIs.
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{listen}" if userinfo else listen
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                 if k not in ("host", "port", "hostaddr")]
        return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    d = conninfo_to_dict(dsn)
    d.pop("hostaddr", None)
    d.update(host=host, port=port)
    return make_conninfo("", **d)


ENDPOINT = {"mongodb": mongodb_endpoint, "postgres": postgres_endpoint}
VIA = {"mongodb": mongodb_via, "postgres": postgres_via}


# ----------------------------------------------------------------------------------------------
# Round trips: the added delay as measured, not as set.


def _round_trips_mongodb(uri: str, n: int) -> list[float]:
    import pymongo

    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=int(CLIENT_TIMEOUT_S * 1000),
                             connectTimeoutMS=int(CLIENT_TIMEOUT_S * 1000), maxPoolSize=1) as client:
        admin = client.admin
        for _ in range(WARMUP_ROUND_TRIPS):
            admin.command("ping")
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            admin.command("ping")
            out.append(time.perf_counter() - t0)
    return out


def _round_trips_postgres(dsn: str, n: int) -> list[float]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=int(CLIENT_TIMEOUT_S), autocommit=True) as conn:
        for _ in range(WARMUP_ROUND_TRIPS):
            conn.execute("SELECT 1").fetchone()
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            out.append(time.perf_counter() - t0)
    return out


ROUND_TRIP = {"mongodb": _round_trips_mongodb, "postgres": _round_trips_postgres}
PROBE = {"mongodb": "ping", "postgres": "SELECT 1"}


def measure_round_trip(role: str, uri: str, n: int = ROUND_TRIPS) -> float:
    """Median round trip in ms of `n` trivial requests (MongoDB `ping`, PostgreSQL `SELECT 1`)."""
    try:
        return statistics.median(ROUND_TRIP[role](uri, n)) * 1000
    except HarnessError:
        raise
    except Exception as e:  # any driver error: name the path that failed
        raise HarnessError(f"round trips to {role} at {redact(uri)} failed: {type(e).__name__}: "
                           f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None


def measure_added(role: str, direct_uri: str, proxy_uri: str, n: int = ROUND_TRIPS) -> dict[str, Any]:
    direct = measure_round_trip(role, direct_uri, n)
    proxied = measure_round_trip(role, proxy_uri, n)
    return {"probe": PROBE[role], "round_trips": n, "direct_median_ms": round(direct, 4),
            "proxy_median_ms": round(proxied, 4), "added_ms": round(proxied - direct, 4)}


# ----------------------------------------------------------------------------------------------
# The route.


@dataclass
class Route:
    """Where an experiment's clients connect (`stack`) and what the path was (`record`)."""

    stack: ServerStack
    record: dict[str, Any]
    proxies: dict[str, str] = field(default_factory=dict)   # role -> Toxiproxy proxy name
    listen: dict[str, str] = field(default_factory=dict)    # role -> proxy listener host:port
    api: Toxiproxy | None = None

    def _proxy(self, role: str) -> str:
        # Call before touching self.api: a direct route has none, and should say so.
        if self.api is None:
            raise HarnessError("this route does not go through the proxy (via_proxy is off)")
        if role not in self.proxies:
            raise HarnessError(f"this route has no proxy for {role!r}; it has: {', '.join(self.proxies)}")
        return self.proxies[role]

    def disable(self, role: str) -> None:
        """Cut the path: Toxiproxy closes the listener and every open connection through it."""
        name = self._proxy(role)
        self.api.update_proxy(name, enabled=False)

    def enable(self, role: str) -> None:
        """Restore the path (same listener address)."""
        name = self._proxy(role)
        self.api.update_proxy(name, enabled=True)

    def add_toxic(self, role: str, type: str, attributes: dict[str, Any] | None = None, *,
                  stream: str = "downstream", name: str | None = None, toxicity: float = 1.0) -> str:
        """Add a toxic (latency, timeout, reset_peer, bandwidth, slow_close, slicer, limit_data) to
        the role's proxy; returns its name, for `remove_toxic`."""
        proxy = self._proxy(role)
        toxic = self.api.add_toxic(proxy, type, attributes or {}, stream=stream, name=name,
                                   toxicity=toxicity)
        return toxic["name"]

    def remove_toxic(self, role: str, name: str) -> None:
        proxy = self._proxy(role)
        self.api.remove_toxic(proxy, name)

    def toxics(self, role: str) -> list[dict]:
        proxy = self._proxy(role)
        return self.api.toxics(proxy)


@contextmanager
def route(stack: ServerStack, needs: Iterable[str], *, via_proxy: bool, rtt_ms: float = 0.0,
          jitter_ms: float = 0.0) -> Iterator[Route]:
    """Yield the Route for `needs` (database roles): the stack unchanged when not `via_proxy`, else
    a copy whose URIs point at Toxiproxy listeners, with the delay measured. Proxies are removed on
    exit; a Toxiproxy started here (the stack had none) is stopped."""
    check_setting(via_proxy, rtt_ms, jitter_ms)
    roles = [r for r in servers.ROLES if r in set(needs)]
    unknown = set(needs) - set(servers.ROLES)
    if unknown:
        raise HarnessError(f"unknown server role(s) {sorted(unknown)} for the network route; "
                           f"known: {list(servers.ROLES)}")
    for role in roles:
        if getattr(stack, role) is None:
            raise HarnessError(f"the network route needs the {role} server, which this stack lacks")
    record: dict[str, Any] = {"via_proxy": bool(via_proxy), "rtt_ms": float(rtt_ms),
                              "jitter_ms": float(jitter_ms)}
    if not via_proxy:
        yield Route(stack=stack, record=record)
        return

    with ExitStack() as cleanup:
        proxy_server = stack.toxiproxy
        if proxy_server is None:
            # No Toxiproxy in the stack: run one for this route only.
            proxy_server = cleanup.enter_context(servers.provision((servers.PROXY,))).toxiproxy
        api = Toxiproxy(proxy_server.uri)
        cleanup.callback(api.close)
        record["toxiproxy"] = {"api": proxy_server.uri, "version": proxy_server.version,
                               "reported_version": api.version(), "source": proxy_server.source}
        routed = dataclasses.replace(stack, toxiproxy=proxy_server, owned=[])
        r = Route(stack=routed, record=record, api=api)
        tag = uuid.uuid4().hex[:8]  # proxies of concurrent routes on a shared Toxiproxy never clash
        for role in roles:
            server: Server = getattr(stack, role)
            host, port = ENDPOINT[role](server.uri)
            name = f"harness-{role}-{tag}"
            created = api.create_proxy(name, _upstream(host, port))
            cleanup.callback(_delete_quietly, api, name)
            r.proxies[role], r.listen[role] = name, created["listen"]
            if rtt_ms > 0:
                api.add_toxic(name, "latency", {"latency": int(rtt_ms), "jitter": int(jitter_ms)},
                              stream="downstream", name="rtt")
            setattr(routed, role, dataclasses.replace(server, uri=VIA[role](server.uri, created["listen"])))
            record[role] = {"upstream": _upstream(host, port), "listen": created["listen"],
                            "toxics": [{k: t[k] for k in ("type", "stream", "attributes")}
                                       for t in api.toxics(name)],
                            **measure_added(role, server.uri, getattr(routed, role).uri)}
        yield r


def _delete_quietly(api: Toxiproxy, name: str) -> None:
    try:
        api.delete_proxy(name)
    except HarnessError:
        pass  # the Toxiproxy may be gone already (stopped, or killed by a fault test)
