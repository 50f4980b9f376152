"""The soak's seeded fault schedule (pure): one random fault per slot, never two at once."""

from __future__ import annotations

import random
from collections.abc import Sequence

from lab.fabric.params import LabParams
from lab.proc.schedule import Step

FAULT_KINDS = ("flap", "reboot-t0", "reboot-t1", "port", "loss")
FIRST_FAULT_S = 5.0  # the first steps run clean: a reference for the step time
SLOT_JITTER = 0.2  # a fault starts in the first 20% of its slot (60 / events-per-min s)
GAP_S = 1.5  # between one fault's undo and the next fault: faults never overlap
MIN_FAULT_S = 0.5  # shorter faults are not worth a slot
DOWN_S = (2.0, 5.0)  # a link flap's or a NIC port's down time: "a few seconds"
LOSS_S = (3.0, 8.0)  # how long a loss rule stays
LOSS_PERCENTS = (0.5, 1.0, 2.0, 5.0)
REBOOT_DOWN_MS = (500.0, 2000.0)
BOOT_S = 1.0  # a rebooted switch needs this long to be ready again (bounded in the slot)
MAX_EVENTS_PER_MIN = 20.0


def make_schedule(
    seed: int,
    duration_s: float,
    events_per_min: float,
    params: LabParams,
    hosts: Sequence[str],
) -> list[Step]:
    """Random faults, one per slot of ``60 / events_per_min`` seconds from FIRST_FAULT_S on,
    each undone (or its switch back) GAP_S before the next slot and before the end, so faults
    never overlap. The same arguments always give the same schedule."""
    if events_per_min <= 0 or events_per_min > MAX_EVENTS_PER_MIN:
        raise ValueError(f"events per minute must be in (0, {MAX_EVENTS_PER_MIN:g}]")
    rng = random.Random(seed)
    period_s = 60.0 / events_per_min
    steps: list[Step] = []
    slot_start = FIRST_FAULT_S
    while slot_start < duration_s:
        at_s = round(slot_start + rng.uniform(0.0, SLOT_JITTER * period_s), 2)
        room_s = min(slot_start + period_s, duration_s) - GAP_S - at_s
        if room_s >= MIN_FAULT_S:
            steps.append(random_fault(rng, at_s, room_s, params, hosts))
        slot_start += period_s
    return steps


def random_fault(
    rng: random.Random, at_s: float, room_s: float, params: LabParams, hosts: Sequence[str]
) -> Step:
    """One fault of a random kind at ``at_s`` that is over within ``room_s``."""
    kind = rng.choice(FAULT_KINDS)
    plane = rng.randrange(params.planes)
    t0 = f"p{plane}-t0-{rng.randrange(params.t0)}"
    t1 = f"p{plane}-t1-{rng.randrange(params.t1)}"
    host = rng.choice(list(hosts))
    if kind in ("reboot-t0", "reboot-t1"):
        down_ms = min(rng.uniform(*REBOOT_DOWN_MS), max(100.0, (room_s - BOOT_S) * 1000))
        return Step("reboot", at_s, t0 if kind == "reboot-t0" else t1, down_ms=round(down_ms))
    if kind == "loss":
        percent = rng.choice(LOSS_PERCENTS)
        # half on a fabric (T0-T1) link, half on a ring host's link to its T0
        host_t0 = f"p{plane}-t0-{int(host[1:]) // params.hosts_per_t0}"
        a, b = (t0, t1) if rng.random() < 0.5 else (host, host_t0)
        undo = at_s + min(rng.uniform(*LOSS_S), room_s)
        return Step("loss", at_s, a, b, undo_s=round(undo, 2), percent=percent)
    undo = round(at_s + min(rng.uniform(*DOWN_S), room_s), 2)
    if kind == "port":
        return Step("port", at_s, host, plane=plane, undo_s=undo)
    return Step("link", at_s, t0, t1, undo_s=undo)


def fault_kind(step: Step) -> str:
    """The soak's name of a step's kind: flap, reboot-t0, reboot-t1, port or loss."""
    if step.kind == "reboot":
        return "reboot-t0" if "-t0-" in step.a else "reboot-t1"
    return "flap" if step.kind == "link" else step.kind
