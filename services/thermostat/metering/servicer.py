"""Metering's gRPC servicers: proto → repository → policy → proto."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime

import grpc
from google.api import httpbody_pb2

from thermostat.chassis.auth import caller
from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.lookup import found_or_abort
from thermostat.chassis.rest_json import rest_json
from thermostat.chassis.tenancy import scope
from thermostat.chassis.timestamps import stamp
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.policy.common.echo import quoted
from thermostat.policy.common.pod_options import PodOptions, find_pod
from thermostat.policy.common.strict_json import BodyError, BodyField, JsonKind, read_json_object
from thermostat.policy.metering.budget import BudgetVerdict, PodBudget, judge_budget
from thermostat.policy.metering.pod_spend import PodSpend, SpendSummary, fold_spend, spend, summary_spend
from thermostat.policy.metering.pool_spend import pool_spend

from .repository import FeedState, MeteringRepository

DEFAULT_SPEND_PAGE = 100
MAX_SPEND_PAGE = 1000
_PAGE_TOKEN = re.compile(r"[0-9]{1,18}")  # an offset this service returned


class MeteringCore:
    """What both servicers share: the pods metering knows by name, the repository and the clock."""

    def __init__(
        self,
        pods: Sequence[PodOptions],
        repository: MeteringRepository,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.pods = tuple(pods)
        self.repository = repository
        self.clock = clock
        # per pod name, the spend folded so far: a budget check folds only the actions landed since (one
        # indexed statement, constant in the history's length); each check reads the ledger, so a page landed
        # by another replica is seen as well
        self.summaries: dict[str, SpendSummary] = {}

    async def budget_and_spend(self, pod: PodOptions, now: datetime) -> tuple[PodBudget, float, float]:
        """The pod's budget and its spend today and this month (UTC), an open interval counted to `now`."""
        known = self.summaries.get(pod.name, SpendSummary())
        budget, events = await self.repository.pod_check(pod.name, known.position)
        folded = fold_spend(known, events)
        current = self.summaries.get(pod.name)
        if current is None or current.position < folded.position:  # a concurrent check may have folded further
            self.summaries[pod.name] = folded
        today, month = summary_spend(folded, now)
        return budget, today, month

    async def pod(self, name: str, context: grpc.aio.ServicerContext) -> PodOptions:
        return await found_or_abort(find_pod(self.pods, name), context, f"unknown pod name {quoted(name)}")

    async def spend(self, pod: PodOptions, now: datetime) -> PodSpend:
        return spend(await self.repository.pod_events(pod.name), now)

    async def tenant_spend(self, tenant_id: str, now: datetime) -> tuple[float, float]:
        """A pool tenant's machine spend (USD) today and this month, UTC, to now."""
        month_start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        day_start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        machines, jobs = await self.repository.pool_time(tenant_id, month_start, now)
        month = pool_spend(machines, jobs, since=month_start, until=now, now=now)
        today = pool_spend(machines, jobs, since=day_start, until=now, now=now) if day_start < now else ()
        return sum(line.machine_usd for line in today), sum(line.machine_usd for line in month)

    async def tenants_spend(self, now: datetime, *, limit: int) -> dict[str, tuple[PodBudget, float, float]]:
        """Every tenant with machine time this UTC month or a ceiling (at most `limit` of those): its budget and
        its machine spend (USD) today and this month, from one read of the month's pool time."""
        month_start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        day_start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        machines, jobs = await self.repository.pool_time(None, month_start, now)
        budgets = await self.repository.tenant_budgets(limit)
        month = pool_spend(machines, jobs, since=month_start, until=now, now=now)
        today = pool_spend(machines, jobs, since=day_start, until=now, now=now) if day_start < now else ()
        spent: dict[str, list[float]] = {tenant: [0.0, 0.0] for tenant in budgets}
        for index, lines in ((0, today), (1, month)):
            for line in lines:
                spent.setdefault(line.tenant_id, [0.0, 0.0])[index] += line.machine_usd
        return {tenant: (budgets.get(tenant, PodBudget()), day, mon) for tenant, (day, mon) in spent.items()}

    async def tenant_budget_message(self, tenant_id: str, budget: PodBudget) -> metering_pb2.TenantBudget:
        today, month = await self.tenant_spend(tenant_id, self.clock.now())
        message = metering_pb2.TenantBudget(tenant_id=tenant_id, today_usd=today, month_usd=month)
        if budget.daily_usd is not None:
            message.daily_usd = budget.daily_usd
        if budget.monthly_usd is not None:
            message.monthly_usd = budget.monthly_usd
        return message


def _budget_message(name: str, budget: PodBudget, spent: PodSpend) -> metering_pb2.PodBudget:
    message = metering_pb2.PodBudget(name=name, today_usd=spent.today_usd, month_usd=spent.month_usd)
    if budget.daily_usd is not None:
        message.daily_usd = budget.daily_usd
    if budget.monthly_usd is not None:
        message.monthly_usd = budget.monthly_usd
    return message


class MeteringServicer(metering_pb2_grpc.MeteringServicer):  # type: ignore[misc]
    def __init__(self, core: MeteringCore) -> None:
        self.core = core

    async def GetPodSpend(
        self, request: metering_pb2.GetPodSpendRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.GetPodSpendResponse:
        pod = await self.core.pod(request.name, context)
        now = self.core.clock.now()
        spent = await self.core.spend(pod, now)
        response = metering_pb2.GetPodSpendResponse(
            name=pod.name, total_usd=spent.total_usd, today_usd=spent.today_usd, month_usd=spent.month_usd
        )
        stamp(response.as_of, now)
        for line in spent.lines:
            response.lines.append(
                metering_pb2.SpendLine(
                    day=line.day.isoformat(), gpu_type=line.gpu_type, seconds=line.seconds, usd=line.usd
                )
            )
        for interval in spent.intervals:
            entry = metering_pb2.BilledInterval(
                pod_id=interval.pod_id,
                gpu_type=interval.gpu_type,
                price_per_hour=interval.price_per_hour,
                usd=interval.usd(now),
            )
            stamp(entry.start, interval.start)
            if interval.end is not None:
                stamp(entry.end, interval.end)
            response.intervals.append(entry)
        return response

    async def GetPodBudget(
        self, request: metering_pb2.GetPodBudgetRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.PodBudget:
        pod = await self.core.pod(request.name, context)
        return _budget_message(
            pod.name, await self.core.repository.pod_budget(pod.name), await self.core.spend(pod, self.core.clock.now())
        )

    async def GetTenantBudget(
        self, request: metering_pb2.GetTenantBudgetRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.TenantBudget:
        tenant = request.tenant_id.strip()
        # the path's tenant is compared with the caller's header tenant (pool_access.py), never taken for it
        shown = scope(caller(), tenant)
        if not tenant or (shown is not None and shown != tenant):
            await context.abort(grpc.StatusCode.NOT_FOUND, "no budget of that tenant for this caller")
        return await self.core.tenant_budget_message(tenant, await self.core.repository.tenant_budget(tenant))

    async def SetTenantBudget(
        self, request: metering_pb2.SetTenantBudgetRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.TenantBudget:
        # the pool admin token's alone, checked by the chassis (pool_access.py)
        return await self._set_tenant_budget(request, context)

    async def SetTenantBudgetJson(
        self, request: metering_pb2.SetTenantBudgetJsonRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.TenantBudget:
        # the pool admin token was checked by the chassis before this runs: the token before the body
        ceilings = await _ceilings(request.payload.data, {"tenant_id": request.tenant_id}, context)
        return await self._set_tenant_budget(
            metering_pb2.SetTenantBudgetRequest(tenant_id=request.tenant_id, **ceilings), context
        )

    async def _set_tenant_budget(
        self, request: metering_pb2.SetTenantBudgetRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.TenantBudget:
        tenant = request.tenant_id.strip()
        if not tenant or len(tenant) > 128:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "tenant_id must be 1-128 characters")
        budget = await _budget_from(request, context)
        await self.core.repository.set_tenant_budget(tenant, budget)
        return await self.core.tenant_budget_message(tenant, budget)

    async def SetPodBudget(
        self, request: metering_pb2.SetPodBudgetRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.PodBudget:
        pod = await self.core.pod(request.name, context)
        budget = await _budget_from(request, context)
        await self.core.repository.set_pod_budget(pod.name, budget)
        return _budget_message(pod.name, budget, await self.core.spend(pod, self.core.clock.now()))

    async def SetPodBudgetJson(
        self, request: metering_pb2.SetPodBudgetJsonRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.PodBudget:
        # the operator token was checked by the server's auth rules (__main__.auth_rules) before this runs; an
        # unknown pod is 404 before its body is read, as on every pod route (the seed's order)
        await self.core.pod(request.name, context)
        # a pod's name is case-insensitive on every route (find_pod): the body may repeat it in another case
        ceilings = await _ceilings(request.payload.data, {"name": request.name}, context, folded=("name",))
        return await self.SetPodBudget(metering_pb2.SetPodBudgetRequest(name=request.name, **ceilings), context)

    async def GetLedgerStatus(
        self, request: metering_pb2.GetLedgerStatusRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.GetLedgerStatusResponse:
        response = metering_pb2.GetLedgerStatusResponse()
        for feed in await self.core.repository.feeds():
            status = metering_pb2.FeedStatus(
                source=feed.source,
                position=feed.position,
                head_position=feed.head_position,
                lag_events=feed.lag_events,
                error=feed.error,
            )
            if feed.last_read_at is not None:
                stamp(status.last_read_at, feed.last_read_at)
            response.feeds.append(status)
        return response

    async def GetLedgerStatusJson(
        self, request: metering_pb2.GetLedgerStatusJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        # no read yet (last_read_at unset) and no error are null (docs/api.md, "Absent values")
        status = await self.GetLedgerStatus(metering_pb2.GetLedgerStatusRequest(), context)
        return rest_json(status, absent={"thermostat.metering.v1.FeedStatus": ("error",)})

    async def GetMeteringHealthJson(
        self, request: metering_pb2.GetMeteringHealthJsonRequest, context: grpc.aio.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        body = json.dumps({"ledger": [feed_health(feed) for feed in await self.core.repository.feeds()]})
        return httpbody_pb2.HttpBody(content_type="application/json", data=body.encode())

    async def GetPoolSpend(
        self, request: metering_pb2.GetPoolSpendRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.GetPoolSpendResponse:
        tenant = scope(caller(), request.tenant_id)
        if request.page_size < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size must not be negative")
        # ASCII digits, bounded: str.isdigit() also admits "²", which int() refuses (an UNKNOWN, a 500)
        if request.page_token and not _PAGE_TOKEN.fullmatch(request.page_token):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_token is not one this service returned")
        now = self.core.clock.now()
        since, until = await _range(request, now, context)
        machines, jobs = await self.core.repository.pool_time(tenant, since, until)
        lines = pool_spend(machines, jobs, since=since, until=until, now=now)
        start = int(request.page_token or 0)
        size = min(request.page_size or DEFAULT_SPEND_PAGE, MAX_SPEND_PAGE)
        page = lines[start : start + size]
        response = metering_pb2.GetPoolSpendResponse(
            since=since.timestamp(),
            until=until.timestamp(),
            next_page_token=str(start + size) if start + size < len(lines) else "",
        )
        for line in page:
            response.lines.add(
                tenant_id=line.tenant_id,
                machine_type=line.machine_type,
                machine_seconds=line.machine_seconds,
                machine_usd=line.machine_usd,
                job_seconds=line.job_seconds,
                job_usd=line.job_usd,
                priced=line.priced,
            )
        return response


def feed_health(feed: FeedState) -> dict[str, object]:
    """One feed as the edge's GET /health shows it under metering's entry."""
    return {
        "feed": feed.source,
        "position": feed.position,
        "head_position": feed.head_position,
        "lag_events": feed.lag_events,
        "lag_seconds": None if feed.lag_seconds is None else round(feed.lag_seconds, 3),
        "error": feed.error,
    }


NOT_A_CEILING = "must be a non-negative number of USD (leave it out for no ceiling)"

# a REST budget body: {daily_usd, monthly_usd}, either spelling; a field left out is no ceiling
BUDGET_BODY = (BodyField("daily_usd", JsonKind.NUMBER), BodyField("monthly_usd", JsonKind.NUMBER))


async def _ceilings(
    data: bytes, bound: dict[str, str], context: grpc.aio.ServicerContext, *, folded: tuple[str, ...] = ()
) -> dict[str, float]:
    """The ceilings a REST body sets, read strictly (policy/common/strict_json.py): anything else is 400."""
    read = read_json_object(data, BUDGET_BODY, bound=bound, folded=folded)
    if isinstance(read, BodyError):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, read.detail)
        raise AssertionError("unreachable")  # abort raises
    ceilings = {name: float(value) for name, value in read.values.items()}
    for name, value in ceilings.items():
        if not math.isfinite(value) or value < 0:  # named as every other body error is: body.<field>
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"body.{name}: {NOT_A_CEILING}")
    return ceilings


async def _budget_from(
    request: metering_pb2.SetPodBudgetRequest | metering_pb2.SetTenantBudgetRequest, context: grpc.aio.ServicerContext
) -> PodBudget:
    """The ceilings of a set request, each checked: a non-negative finite USD amount, or left out (none)."""
    for field in ("daily_usd", "monthly_usd"):
        if request.HasField(field):
            value = getattr(request, field)
            if not math.isfinite(value) or value < 0:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {NOT_A_CEILING}")
    return PodBudget(
        daily_usd=request.daily_usd if request.HasField("daily_usd") else None,
        monthly_usd=request.monthly_usd if request.HasField("monthly_usd") else None,
    )


# 9999-12-31T23:59:59Z: a datetime cannot hold a later moment
LAST_EPOCH_SECOND = 253_402_300_799


async def _range(
    request: metering_pb2.GetPoolSpendRequest, now: datetime, context: grpc.aio.ServicerContext
) -> tuple[datetime, datetime]:
    """The request's [since, until): 0 means the start of the current UTC month / now."""
    for field in ("since", "until"):
        value = getattr(request, field)
        if not math.isfinite(value) or value < 0 or value > LAST_EPOCH_SECOND:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"{field} must be epoch seconds up to 9999 (0: the default)"
            )
    month_start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    since = datetime.fromtimestamp(request.since, UTC) if request.since else month_start
    until = datetime.fromtimestamp(request.until, UTC) if request.until else now
    if since >= until:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "since must be before until")
    return since, until


class MeteringInternalServicer(metering_pb2_grpc.MeteringInternalServicer):  # type: ignore[misc]
    def __init__(self, core: MeteringCore) -> None:
        self.core = core

    async def CheckPodBudget(
        self, request: metering_pb2.CheckPodBudgetRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.CheckPodBudgetResponse:
        pod = await self.core.pod(request.name, context)
        if not math.isfinite(request.projected_usd) or request.projected_usd < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "projected_usd must be a non-negative number")
        budget, today, month = await self.core.budget_and_spend(pod, self.core.clock.now())
        if budget.daily_usd is None and budget.monthly_usd is None:
            # no ceiling: nothing to judge
            return metering_pb2.CheckPodBudgetResponse(allowed=True, projected_usd=request.projected_usd)
        verdict = judge_budget(
            budget, today_usd=today, month_usd=month, projected_usd=request.projected_usd, pod_name=pod.name
        )
        return _verdict_message(budget, verdict, today_usd=today, month_usd=month)

    async def CheckTenantBudget(
        self, request: metering_pb2.CheckTenantBudgetRequest, context: grpc.aio.ServicerContext
    ) -> metering_pb2.CheckPodBudgetResponse:
        tenant = request.tenant_id.strip()
        if not tenant:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "tenant_id is required")
        budget = await self.core.repository.tenant_budget(tenant)
        if budget.daily_usd is None and budget.monthly_usd is None:
            return metering_pb2.CheckPodBudgetResponse(allowed=True)
        today, month = await self.core.tenant_spend(tenant, self.core.clock.now())
        verdict = judge_budget(budget, today_usd=today, month_usd=month, projected_usd=0.0, subject=f"tenant {tenant}")
        return _verdict_message(budget, verdict, today_usd=today, month_usd=month)


def _verdict_message(
    budget: PodBudget, verdict: BudgetVerdict, *, today_usd: float, month_usd: float
) -> metering_pb2.CheckPodBudgetResponse:
    """A pod's or a tenant's budget verdict as answered, with the spend it was judged on and the ceilings set
    (a tenant's verdict projects nothing: its projected_usd is 0)."""
    response = metering_pb2.CheckPodBudgetResponse(
        allowed=verdict.allowed,
        exhausted=verdict.exhausted,
        budget=str(verdict.period or ""),
        reason=verdict.reason,
        limit_usd=verdict.limit_usd,
        spent_usd=verdict.spent_usd,
        projected_usd=verdict.projected_usd,
        today_usd=today_usd,
        month_usd=month_usd,
    )
    if budget.daily_usd is not None:
        response.daily_limit_usd = budget.daily_usd
    if budget.monthly_usd is not None:
        response.monthly_limit_usd = budget.monthly_usd
    return response
