"""The FastAPI experiments' shared parameters: `FastapiLocustParams` and the `RESHAPING` note.

fastapi_locust uses them as they are; fastapi_crossover and fastapi_openloop extend them. They
live here, not in one of those experiments, so that experiments do not import each other (a
`Params` class needs `experiments.base`, a floor above the family's `workload`). Not an experiment:
it exposes no `EXPERIMENT`, so the registry passes over it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core import datasets
from ...core.errors import HarnessError
from ..base import Params
from .workload import CLOUD_RTT_MS, QUERIES, VARIANTS, index_key, request_path


@dataclass(frozen=True)
class FastapiLocustParams(Params):
    via_proxy: bool = True                 # seed 000 ran against a cloud database (Atlas)
    rtt_ms: float = CLOUD_RTT_MS
    documents: int = 5_555                 # sample_airbnb's listingsAndReviews size
    variants: tuple[str, ...] = tuple(VARIANTS)
    query: str = "page"                    # page | fast | seed (see the module docstring)
    page: int = 0                          # query page: page 0 = the seed's first page
    market: str = "Porto"                  # query fast: search_key = "<market>|<band>"
    band: int = 1                          # price band (price // 100): 31 listings for Porto|1
    loop: str = "asyncio"                  # uvicorn --loop: asyncio | uvloop
    min_rating: int = 95                   # query seed: rating >= min_rating, sorted by price...
    page_size: int = datasets.PAGE_SIZE    # ...first page_size listings (query page: at most PAGE_SIZE)
    users: int = 500                       # the seed's peak
    spawn_rate: float = 10.0               # users/s: 500 users after 50 s
    hold_s: float = 30.0                   # at `users` after the ramp
    wait_min_s: float = 0.5                # Locust think time between a user's requests
    wait_max_s: float = 1.5
    request_timeout_s: float = 60.0        # FastHttpUser timeouts (Locust's default)
    locust_workers: int = 0                # 0: one Locust process; N: master + N workers on loopback
    saturation_workers: int = 2            # rerun a saturated variant with master + N workers (0: never)
    openloop_variants: tuple[str, ...] = ()
    openloop_rate_fractions: tuple[float, ...] = (0.25, 0.5, 0.9)  # of the variant's hold throughput
    openloop_rates: tuple[float, ...] = ()  # fixed rates (req/s); when set, used instead of fractions
    openloop_min_rate: float = 0.2
    openloop_duration_s: float = 25.0
    openloop_connections: int = 16
    openloop_drain_s: float = 15.0
    health_timeout_s: float = 60.0
    cpu_sample_s: float = 1.0
    ping_count: int = 50
    timeout_s: float = 900.0

    @property
    def ramp_s(self) -> float:
        return self.users / self.spawn_rate

    @property
    def run_time_s(self) -> int:
        return int(round(self.ramp_s + self.hold_s))

    def validate(self) -> None:
        super().validate()
        self.require_positive("documents", "page_size", "users", "spawn_rate", "hold_s",
                              "request_timeout_s", "openloop_duration_s", "openloop_connections",
                              "openloop_min_rate", "health_timeout_s", "cpu_sample_s", "ping_count")
        self.require_non_negative("wait_min_s", "wait_max_s", "locust_workers", "saturation_workers",
                                  "openloop_drain_s", "openloop_rate_fractions", "openloop_rates", "band", "page",
                                  "rtt_ms")
        self.require_choice("variants", tuple(VARIANTS))
        self.require_choice("openloop_variants", tuple(VARIANTS))
        self.require_choice("loop", ("asyncio", "uvloop"))
        self.require_choice("query", QUERIES)
        if not 0 <= self.min_rating <= 100:
            raise HarnessError(f"parameter min_rating must be a review score from 0 to 100, got {self.min_rating}")
        if self.wait_max_s < self.wait_min_s:
            raise HarnessError("parameter wait_max_s must be at least wait_min_s")
        if self.query == "page" and self.page_size > datasets.PAGE_SIZE:
            raise HarnessError(f"parameter page_size must be at most {datasets.PAGE_SIZE} with query=page "
                               f"(the companion collection's page size), got {self.page_size}")
        if self.rtt_ms and not self.via_proxy:
            raise HarnessError("parameter rtt_ms needs via_proxy=true")

    @property
    def path(self) -> str:
        return request_path(self.query, page=self.page, market=self.market, band=self.band,
                            min_rating=self.min_rating, limit=self.page_size)

    @property
    def index_probe(self) -> str:
        """The key value the default request looks up (for the index's recorded plan)."""
        return index_key(self.query, page=self.page, market=self.market, band=self.band)


RESHAPING = {
    "page": (f"subset pattern: `{datasets.PAGE_COLLECTION}` holds the projected fields of the listings rated "
             f">= {datasets.SEARCH_MIN_RATING}, ranked by (price, _id), {datasets.PAGE_SIZE} to a `page_key` "
             "'<min rating>|<page>' (built at load time from the listings; its marker in `_datasets`); "
             "the request reads one key, so page 0 is the seed's first page"),
    "fast": ("computed pattern: listings rated >= 95 carry `search_key` '<market>|<price // 100>'; "
             "the request reads one key of the full collection"),
}
