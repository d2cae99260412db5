"""Idle-stop cost: replay simulated chat use through the real idle-monitor policy and compare with an oracle.

A seeded generator writes SIMULATED_DAYS of realistic chat use: sessions hours apart, each a run of turns
that occupy vLLM for a few seconds, separated by the user's reading/typing gaps of seconds to minutes (every
gap shorter than IDLE_MINUTES — that is what makes it one session). The pod is woken by a session's first
turn and boots for a few minutes (wake → ready measured between 2:52 and 9:00 in the pod-control seed); a turn that
arrives while the pod is stopped wakes it again and waits for that boot.

Three policies bill the same trace:
- oracle: stops exactly IDLE_MINUTES after the last turn of each session (same first boot);
- counter + gauge: the real `thermostat.policy.idle.monitor_tick.tick`, scraping every CHECK_SECONDS — gauges
  are nonzero only while a turn runs, the work counter advances when a turn completes;
- gauge only: the same `tick`, fed scrapes without a work counter (completed=None) — the pre-#2075 bug.

It prints billed minutes per session relative to the oracle and the number of mid-session stops (a stop
followed by another turn of the same session, which then waits for a fresh boot). Goal: the real policy
within 1.02× the oracle and zero mid-session stops.

    python bench/idle_cost.py [--days 30] [--seed 2075]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.policy.idle.monitor_tick import PodStopOutcome, StopResult, TickObservation, after_stop, tick
from thermostat.policy.idle.pod_signal import PodReading
from thermostat.policy.idle.vllm_metrics import PodActivity

SIMULATED_DAYS = 30
OPTIONS = MonitorOptions()  # the pod-control seed's defaults: IDLE 15 min, CHECK 60 s, cap 6 h, boot grace 20 min
IDLE = OPTIONS.idle_minutes * 60
CHECK = OPTIONS.check_seconds
EPOCH = datetime(2026, 9, 1, tzinfo=UTC)
POD = "pod-1"  # RunPod reuses the id across stop/start
GOAL_RATIO = 1.02


@dataclass(frozen=True)
class Turn:
    gap_before: float  # seconds from the previous turn's end to this request (0 for the first)
    duration: float  # seconds vLLM is busy with it


@dataclass(frozen=True)
class Session:
    start: float  # seconds since EPOCH of the first request
    turns: tuple[Turn, ...]
    boots: tuple[tuple[float, float], ...]  # per wake: (startup seconds, wake → ready seconds)


def generate(rng: random.Random, days: int) -> list[Session]:
    sessions: list[Session] = []
    t = 7 * 3600.0
    while t < days * 86400:
        turns = [Turn(gap_before=0.0, duration=_turn_seconds(rng))]
        turns += [Turn(gap_before=_gap_seconds(rng), duration=_turn_seconds(rng)) for _ in range(_extra_turns(rng))]
        boots = tuple(_boot(rng) for _ in range(len(turns)))
        sessions.append(Session(start=t, turns=tuple(turns), boots=boots))
        span = sum(turn.gap_before + turn.duration for turn in turns)
        t += span + 3600 + rng.expovariate(1 / (6 * 3600))  # idle gaps of hours
    return sessions


def _extra_turns(rng: random.Random) -> int:
    return int(rng.expovariate(1 / 7))


def _turn_seconds(rng: random.Random) -> float:
    return min(60.0, max(1.0, rng.lognormvariate(math.log(6), 0.6)))


def _gap_seconds(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.70:
        gap = rng.lognormvariate(math.log(40), 0.8)  # reading the answer, typing the next question
    elif roll < 0.95:
        gap = rng.lognormvariate(math.log(180), 0.5)  # trying the answer out
    else:
        gap = rng.uniform(360, IDLE - 60)  # a short break, still inside the idle window
    return min(IDLE - 60, max(3.0, gap))


def _boot(rng: random.Random) -> tuple[float, float]:
    return rng.uniform(15, 60), rng.uniform(172, 540)


@dataclass
class Pod:
    """The simulated pod: wake/stop times, its current process's turns, and the billed seconds."""

    up: bool = False
    woke_at: float = 0.0
    starting_until: float = 0.0
    ready_at: float = 0.0
    turns: list[tuple[float, float]] = field(default_factory=list)
    billed: float = 0.0

    def wake(self, t: float, boot: tuple[float, float]) -> None:
        self.up, self.woke_at, self.turns = True, t, []
        self.starting_until, self.ready_at = t + boot[0], t + boot[1]

    def stop(self, t: float) -> None:
        self.up = False
        self.billed += t - self.woke_at

    def reading(self, t: float, *, with_counter: bool) -> PodReading:
        if not self.up:
            return _observed(PodStatus.EXITED)
        if t < self.starting_until:
            return _observed(PodStatus.STARTING)
        if t < self.ready_at:
            return _observed(PodStatus.RUNNING)  # model loading: /metrics 502
        active = sum(1 for start, end in self.turns if start <= t < end)
        completed = float(sum(1 for _, end in self.turns if end <= t)) if with_counter else None
        return PodReading(pod_id=POD, scrape=PodActivity(active=active, completed=completed))


def _observed(status: PodStatus) -> PodReading:
    return PodReading(pod_id=POD, observation=PodObservation(lookup=Lookup.FOUND, pod_id=POD, status=status))


@dataclass
class Monitor:
    """The real policy on a CHECK_SECONDS clock, acting on the simulated pod."""

    pod: Pod
    with_counter: bool
    state: MonitorState = field(default_factory=MonitorState)
    next_tick: float = 0.0

    def run_until(self, t: float) -> None:
        while self.next_tick <= t:
            if self.pod.up:
                self._tick(self.next_tick)
            self.next_tick += CHECK

    def run_until_stopped(self) -> None:
        while self.pod.up:
            self.run_until(self.next_tick)

    def _tick(self, t: float) -> None:
        observation = TickObservation(
            volume=VolumeLookup(lookup=Lookup.FOUND, pod_ids=(POD,)),
            pods=(self.pod.reading(t, with_counter=self.with_counter),),
        )
        now = EPOCH + timedelta(seconds=t)
        decision = tick(self.state, observation, now, OPTIONS)
        self.state = decision.state
        if decision.stop is not None:
            self.pod.stop(t)
            outcomes = tuple(PodStopOutcome(pod_id=pod, ok=True) for pod in decision.stop.pod_ids)
            self.state = after_stop(self.state, StopResult(trigger=decision.stop.trigger, outcomes=outcomes), now).state


@dataclass(frozen=True)
class Outcome:
    billed_minutes: list[float]
    mid_session_stops: int
    waits_minutes: float  # extra time users waited for re-wakes


def replay(sessions: list[Session], *, with_counter: bool) -> Outcome:
    pod = Pod()
    monitor = Monitor(pod=pod, with_counter=with_counter)
    billed, mid_session_stops, waits = [], 0, 0.0
    for session in sessions:
        assert not pod.up, "the previous session's pod must be stopped before the next session starts"
        before = pod.billed
        boots: Iterator[tuple[float, float]] = iter(session.boots)
        end = session.start
        for index, turn in enumerate(session.turns):
            request = end + turn.gap_before
            monitor.run_until(request)
            if not pod.up:
                pod.wake(request, next(boots))
                if index > 0:
                    mid_session_stops += 1
                    waits += pod.ready_at - request
            start = max(request, pod.ready_at)
            end = start + turn.duration
            pod.turns.append((start, end))
        monitor.run_until_stopped()
        billed.append((pod.billed - before) / 60)
    return Outcome(billed_minutes=billed, mid_session_stops=mid_session_stops, waits_minutes=waits / 60)


def oracle(sessions: list[Session]) -> Outcome:
    billed = []
    for session in sessions:
        startup_and_load = session.boots[0][1]
        span = sum(turn.gap_before + turn.duration for turn in session.turns)
        billed.append((startup_and_load + span + IDLE) / 60)
    return Outcome(billed_minutes=billed, mid_session_stops=0, waits_minutes=0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--days", type=int, default=SIMULATED_DAYS)
    parser.add_argument("--seed", type=int, default=2075)
    args = parser.parse_args(argv)

    sessions = generate(random.Random(args.seed), args.days)
    turns = sum(len(s.turns) for s in sessions)
    best = oracle(sessions)
    real = replay(sessions, with_counter=True)
    gauge = replay(sessions, with_counter=False)

    base = sum(best.billed_minutes) / len(sessions)
    print(
        f"idle_cost: {args.days} simulated days, {len(sessions)} sessions, {turns} turns (seed {args.seed}); "
        f"IDLE_MINUTES={OPTIONS.idle_minutes:g} CHECK_SECONDS={OPTIONS.check_seconds:g}"
    )
    print(f"{'policy':<24}{'billed min/session':>20}{'vs oracle':>11}{'mid-session stops':>19}{'re-wake wait':>14}")
    for name, outcome in (("oracle", best), ("counter + gauge (real)", real), ("gauge only (#2075 bug)", gauge)):
        per_session = sum(outcome.billed_minutes) / len(sessions)
        print(
            f"{name:<24}{per_session:>20.2f}{per_session / base:>10.3f}x{outcome.mid_session_stops:>19}"
            f"{outcome.waits_minutes:>10.1f} min"
        )
    ratio = sum(real.billed_minutes) / sum(best.billed_minutes)
    worst = max(r / o for r, o in zip(real.billed_minutes, best.billed_minutes, strict=True))
    print(f"real policy: worst single session {worst:.3f}x the oracle")
    passed = ratio <= GOAL_RATIO and real.mid_session_stops == 0
    print(
        f"goal (real ≤ {GOAL_RATIO}x oracle, 0 mid-session stops): {'PASS' if passed else 'FAIL'} "
        f"({ratio:.3f}x, {real.mid_session_stops} stops; the gauge alone cut conversations "
        f"{gauge.mid_session_stops} times)"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
