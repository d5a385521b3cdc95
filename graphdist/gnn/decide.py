"""Everything a ``train-gcn`` run decides, resolved before it builds anything: one plain,
printable object (:class:`Decisions`) made by one function (:func:`decide`) from the config and
the job's facts (:class:`Facts`: every part's statistics, the memory each host has, the link and
the compute rates where ``--halo auto`` needs them, the settings a resumed checkpoint recorded).

    run:   facts = gather_facts(cfg, lg, ctx)      # collectives: every rank gets the same facts
    plan:  facts = Facts(...)                      # every part read in one process, no communication
    both:  dec = decide(cfg, facts)                 # plain data in, plain data out

Every rule of which flags combine that needs data lives here (the rules that need none are the
config's own validation, :meth:`graphdist.gnn.config.GCNConfig.validate`), each refusal one line
(:attr:`Decisions.refusal`). Each decision carries the reason it was taken::

    {"halo":       {"asked": "auto", "value": "mvc", "why": "predicted epoch plain 0.0054 s, mvc ..."},
     "bits":       {"asked": 32, "value": 32, "why": "asked for"},
     "eval_bits":  {"asked": 32, "value": 32, "why": "asked for"},
     "eval_exchange": {"asked": None, "value": "shared", "why": "evaluation moves rows as training does"},
     "rounds":     {"asked": 0, "value": 1, "why": "the fewest of 1, 2, 4, ... whose predicted peak fits ..."},
     "input_halo": {"asked": "resident", "value": "resident", "why": "..."},
     "route":      {"asked": "direct", "value": "direct", "why": "asked for"},
     "reorder":    {"asked": "blocks", "value": "blocks", "why": "asked for"}}

plus the figures they rest on (``memory``: each rank's predicted peak and each host's room;
``estimates``: ``--halo auto``'s predicted epoch per mode). A report carries it as
``run/decisions``; ``graphdist plan --json`` prints the same object for the same inputs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from graphdist.errors import ConfigError
from graphdist.gnn.config import BUILTIN_MODELS
from graphdist.gnn.plan_memory import rank_memory
from graphdist.gnn.plan_time import epoch_seconds, halo_bytes_per_epoch
from graphdist.gnn.stats import PartStats, layer_plan

__all__ = ["Facts", "Decisions", "decide", "input_held_why_not", "round_choices", "ROUNDS"]

GiB = 2 ** 30
ROUNDS = (1, 2, 4, 8, 16, 32, 64)
"""Exchange rounds ``--halo-rounds 0`` chooses from (the fewest that fit)."""


@dataclass
class Facts:
    """What a run's decisions rest on; the same on every rank (gathered once) or built in one
    process by ``graphdist plan``. Plain data (JSON-able)."""

    parts: list[PartStats]
    """every rank's part, in rank order (owned block taken as unsymmetric: an upper bound)"""
    f_in: int
    """input feature columns"""
    n_classes: int
    """classes (the largest label + 1 over all parts)"""
    hosts: list[int]
    """host of each rank (ranks of one host share its memory)"""
    room: list[int] | None = None
    """bytes each rank's host can still give the job's ranks there (None: not checked: on a GPU)"""
    ceiling: list[int | None] = field(default_factory=list)
    """each rank's own process limit in bytes (``ulimit -d`` / ``-v``), None where unlimited"""
    has_mvc: bool = True
    """every part carries the mvc layout"""
    backend: str = "gloo"
    """the process group's backend (quantised rows travel on gloo and NCCL)"""
    link: dict | None = None
    """``{"bytes_per_s", "latency_s", "source"}`` of the link, where ``--halo auto`` needs it"""
    rates: dict | None = None
    """``{"spmm", "dense", "codec": {bits: values/s}}`` compute rates, where ``--halo auto`` needs them"""
    recorded: dict = field(default_factory=dict)
    """settings the resumed checkpoint recorded (``halo``, ``halo_rounds``), else empty"""

    @property
    def k(self) -> int:
        return len(self.parts)


@dataclass
class Decisions:
    """The run's resolved settings, each ``{"value", "why"}``, and the figures they rest on."""

    choices: dict
    """name -> ``{"asked": the config's value, "value": the decision, "why": "..."}``"""
    memory: dict | None = None
    """``peak_bytes_per_rank`` at the chosen rounds, ``room_bytes_per_host``, ``ranks_per_host``"""
    estimates: dict | None = None
    """``--halo auto``: per mode the predicted epoch seconds and halo bytes (all ranks)"""
    refusal: str | None = None
    """why this run cannot go ahead (one line), or None"""

    def __getitem__(self, name: str):
        return self.choices[name]["value"]

    def as_dict(self) -> dict:
        return {**self.choices, "memory": self.memory, "estimates": self.estimates}

    def check(self) -> None:
        """Raise the refusal, if any (every rank decided alike, so every rank raises alike)."""
        if self.refusal:
            raise ConfigError(self.refusal)

    def applied(self, cfg):
        """``cfg`` with the resolved halo mode, rounds and input residency."""
        return dataclasses.replace(cfg, halo=self["halo"], halo_rounds=self["rounds"], input_halo=self["input_halo"])

    def lines(self) -> list[str]:
        """The decisions a user should see in the log (rank 0 logs them): the mode ``--halo auto``
        chose, exchange rounds above one, held input rows given up for memory. Every decision and
        its reason is in the report (``run/decisions``)."""
        c = self.choices
        shown = [n for n, on in (("halo", c["halo"]["asked"] == "auto"), ("rounds", c["rounds"]["value"] > 1),
                                 ("input_halo", c["input_halo"]["why"].startswith(HELD_GIVEN_UP))) if on]
        return [f"{FLAGS[n]} {c[n]['asked']}: {c[n]['value']} ({c[n]['why']})" for n in shown]


ASKED = "asked for"
HELD_GIVEN_UP = "the held rows do not fit"
FLAGS = {"halo": "--halo", "bits": "--halo-bits", "eval_bits": "--eval-halo-bits", "eval_exchange": "evaluation",
         "rounds": "--halo-rounds", "input_halo": "--input-halo", "route": "--halo-route", "reorder": "--reorder"}
"""The flag each decision resolves (what :meth:`Decisions.lines` names)."""


def _c(asked, value, why: str = ASKED) -> dict:
    return {"asked": asked, "value": value, "why": why}


def input_held_why_not(cfg, k: int) -> str | None:
    """None when a run may hold its input's halo rows (``--input-halo resident``,
    :mod:`graphdist.exchange.resident`), else why it exchanges them. Held rows are the exact rows
    the exchange would bring, so they stand in for 32-bit, fresh, whole exchanges only."""
    if getattr(cfg, "input_halo", "exchange") != "resident":
        return "--input-halo exchange asked for"
    if k <= 1:
        return "one rank: no halo"
    for bad, why in ((cfg.halo_bits != 32, f"--halo-bits {cfg.halo_bits} quantises the exchanged rows"),
                     (cfg.halo_staleness, "--halo-staleness exchanges last epoch's rows"),
                     (cfg.boundary_rate < 1.0, "--boundary-rate samples the exchanged rows"),
                     (cfg.label_rate > 0, "--label-rate adds labels to the input, which then needs a gradient")):
        if bad:
            return why
    return None


def round_choices(cfg, k: int) -> list[int]:
    """The exchange rounds a run may take, fewest first: ``--halo-rounds`` as given; 1 at k = 1
    and with stale halos or boundary sampling (their exchanges move whole); else :data:`ROUNDS`."""
    if k == 1 or cfg.halo_staleness or cfg.boundary_rate < 1.0:
        return [1]
    return [cfg.halo_rounds] if cfg.halo_rounds else list(ROUNDS)


def decide(cfg, facts: Facts) -> Decisions:
    """The run's decisions from ``cfg`` and ``facts`` (plain data in, plain data out; no
    communication, so every rank, and ``graphdist plan``, decide alike)."""
    k = facts.k
    active = k > 1
    ch = {}
    ch["bits"] = _bits(cfg, facts)
    why_held = _why_not_held(cfg, facts, ch["bits"]["value"] == "auto")
    est = None
    if cfg.halo != "auto":
        ch["halo"] = _c(cfg.halo, cfg.halo)
    elif facts.recorded.get("halo") in ("plain", "mvc"):
        ch["halo"] = _c("auto", facts.recorded["halo"], "the mode the resumed checkpoint recorded")
    elif not active:
        ch["halo"] = _c("auto", "plain", "one rank: nothing to exchange")
    else:
        ch["halo"], est = _auto_mode(cfg, facts, why_held is None)
    ch["eval_bits"] = _c(cfg.eval_halo_bits, cfg.eval_halo_bits)
    ch["eval_exchange"] = _eval_exchange(cfg, ch["bits"]["value"])
    rounds, held, memory, refusal = _rounds_and_memory(cfg, facts, ch["halo"]["value"], why_held)
    ch["rounds"], ch["input_halo"] = rounds, held
    ch["route"] = _c(cfg.halo_route, cfg.halo_route)
    if refusal is None and cfg.halo_route == "hosts" and rounds["value"] > 1:
        refusal = (f"--halo-route hosts moves each exchange in one round, but this job needs {rounds['value']} "
                   "--halo-rounds to fit memory: use --halo-route direct, or more ranks")
    ch["reorder"] = _c(cfg.reorder, cfg.reorder)
    return Decisions(ch, memory, est, refusal)


def _bits(cfg, facts: Facts) -> dict:
    """The training wire width: ``auto`` (chosen per layer and direction after a calibrating first
    epoch, :class:`graphdist.gnn.auto.AutoBits`) where ``--halo auto`` may choose it, else as given."""
    if cfg.halo == "auto" and cfg.halo_bits == 32 and cfg.halo_error > 0:
        why = ("one rank" if facts.k == 1 else f"--model {cfg.model}" if cfg.model not in BUILTIN_MODELS
               else f"the {facts.backend} backend" if facts.backend not in ("gloo", "nccl") else None)
        if why is None:
            return _c(32, "auto", f"--halo auto: per layer and direction after a calibrating first epoch, "
                                  f"expected relative error <= --halo-error {cfg.halo_error:g}")
        return _c(32, 32, f"--halo auto keeps 32-bit rows: {why} (widths are chosen for graphdist's own models "
                          "on gloo or NCCL, k >= 2)")
    return _c(cfg.halo_bits, cfg.halo_bits)


def _why_not_held(cfg, facts: Facts, auto_bits: bool) -> str | None:
    """Why the input's halo rows are exchanged every epoch (None: they may be held), before memory."""
    from graphdist.gnn.models import held_input
    if cfg.model not in BUILTIN_MODELS:
        return f"--model {cfg.model} exchanges its input in its own layers"
    why = input_held_why_not(cfg, facts.k)
    if why is None and auto_bits:
        why = "--halo auto chooses the first layer's wire width"
    f0 = cfg.hidden if cfg.layers > 1 else facts.n_classes  # the first layer's width
    if why is None and not (held_input(facts.f_in, f0, True) or held_input(facts.f_in, f0, False)):
        why = "the first layer applies its linear first: its rows change every step"
    return why


def _auto_mode(cfg, facts: Facts, held: bool) -> tuple[dict, dict]:
    """``--halo auto``'s mode: the exact mode of the lowest predicted epoch (its slowest rank's),
    mvc on a tie (it moves fewer rows), at the link and rates of ``facts``."""
    link, rates = facts.link, facts.rates
    layers = layer_plan(cfg, facts.f_in, facts.n_classes, True, held)
    modes = ["plain", "mvc"] if facts.has_mvc else ["plain"]
    c = dataclasses.replace(cfg, link_gbps=link["bytes_per_s"] * 8 / 1e9, link_latency_us=link["latency_s"] * 1e6)
    per_mode = {}
    for m in modes:
        cm = dataclasses.replace(c, halo=m)
        per_mode[m] = {"comm/halo_bytes_per_epoch": int(halo_bytes_per_epoch(sum(p.send[m] for p in facts.parts),
                                                                               layers, cm)),
                       "time/epoch_s": max(epoch_seconds(p, layers, cm, m, True, (rates["spmm"], rates["dense"]))
                                           for p in facts.parts)}
    chosen = min(modes, key=lambda m: (per_mode[m]["time/epoch_s"], m != "mvc"))
    est = ", ".join(f"{m} {d['time/epoch_s']:.3g} s" for m, d in per_mode.items())
    why = f"predicted epoch {est}; link {link['bytes_per_s'] * 8 / 1e9:.3g} Gbit/s ({link['source']})"
    return _c("auto", chosen, why), {"modes": per_mode, "link": link, "rates": rates}


def _eval_exchange(cfg, bits) -> dict:
    if cfg.halo_staleness:
        return _c(None, "own", "--halo-staleness: evaluation exchanges fresh rows")
    if bits == "auto":
        return _c(None, "own", "--halo auto's widths are for training: evaluation moves rows at --eval-halo-bits")
    if cfg.eval_halo_bits != bits:
        return _c(None, "own", f"--eval-halo-bits {cfg.eval_halo_bits} differs from the training's {bits}")
    return _c(None, "shared", ASKED)


def _rounds_and_memory(cfg, facts: Facts, mode: str, why_held: str | None):
    """``(rounds, input_halo, memory figures, refusal)``: the fewest rounds whose predicted peak
    fits every host (the ranks of a host share its room) and every rank's own limit; held input
    rows given up first when nothing fits with them."""
    k = facts.k
    recorded = facts.recorded.get("halo_rounds")
    cands = [int(recorded)] if recorded else round_choices(cfg, k)
    held = _c(cfg.input_halo, "resident") if why_held is None else \
        _c(cfg.input_halo, "exchange", ASKED if cfg.input_halo == "exchange" else why_held)
    asked = cfg.halo_rounds
    src = "the resumed checkpoint's choice" if recorded else "one rank: no halo" if k == 1 else None
    if cfg.model not in BUILTIN_MODELS or facts.room is None:
        what = f"--model {cfg.model}: memory is not modelled" if cfg.model not in BUILTIN_MODELS else \
            "GPU memory is not checked"
        return _c(asked, cands[0], ASKED if cands[0] == asked else f"{src or 'one round'}; {what}"), held, None, None
    tries = [True, False] if why_held is None else [False]
    for hold in tries:
        fit, figures = _fewest_fitting(cfg, facts, mode, hold, cands)
        if fit is not None:
            if hold is False and why_held is None:
                held = _c(cfg.input_halo, "exchange", f"{HELD_GIVEN_UP}: {_need_line(cfg, figures, cands)}")
            if (asked and not src) or (k == 1 and asked in (0, 1)):
                why = ASKED
            elif src:
                why = f"{src}; it fits: {_fit_line(figures)}"
            else:
                why = f"the fewest of {', '.join(map(str, cands))} whose predicted peak fits: {_fit_line(figures)}"
            return _c(asked, fit, why), held, figures, None
    return _c(asked, cands[-1], "nothing fits"), held, figures, _need_line(cfg, figures, cands)


def _fewest_fitting(cfg, facts: Facts, mode: str, hold: bool, cands: list[int]):
    """The first of ``cands`` with which every host's ranks fit its room and every rank its own
    limit, and the figures of that candidate (of the last one tried when none fits)."""
    hosts = sorted(set(facts.hosts))
    per_host = {h: facts.hosts.count(h) for h in hosts}
    caps = [c for c in facts.ceiling if c is not None]
    cap = min(caps) if caps else None
    figures = None
    for r in cands:
        c = dataclasses.replace(cfg, halo_rounds=r)
        peaks = [rank_memory(p, c, facts.f_in, facts.n_classes, facts.k, mode, hold)["peak_bytes"]
                 for p in facts.parts]
        need = {h: max(pk for pk, hh in zip(peaks, facts.hosts) if hh == h) * per_host[h] for h in hosts}
        room = {h: min(rm for rm, hh in zip(facts.room, facts.hosts) if hh == h) for h in hosts}
        figures = {"rounds": r, "peak_bytes_per_rank": peaks, "need_bytes_per_host": [need[h] for h in hosts],
                   "room_bytes_per_host": [room[h] for h in hosts], "ranks_per_host": [per_host[h] for h in hosts],
                   "process_limit_bytes": cap}
        if all(need[h] <= room[h] for h in hosts) and (cap is None or max(peaks) <= cap):
            return r, figures
    return None, figures


def _fit_line(f: dict) -> str:
    worst = max(range(len(f["need_bytes_per_host"])),
                key=lambda i: f["need_bytes_per_host"][i] / max(f["room_bytes_per_host"][i], 1))
    return (f"{f['need_bytes_per_host'][worst] / GiB:.2f} of {f['room_bytes_per_host'][worst] / GiB:.2f} GiB on the "
            f"fullest host, {f['ranks_per_host'][worst]} rank(s)")


def _need_line(cfg, f: dict, cands: list[int]) -> str:
    """The refusal when nothing fits: the needed and available GiB and what to change."""
    rounds = f" in {cands[-1]} halo rounds" if cands[-1] > 1 else ""
    more = "more --halo-rounds (0: the fewest that fit), " if cfg.halo_rounds and cands[-1] < ROUNDS[-1] else ""
    per_rank, cap = max(f["peak_bytes_per_rank"]), f["process_limit_bytes"]
    over = [i for i, (n, r) in enumerate(zip(f["need_bytes_per_host"], f["room_bytes_per_host"])) if n > r]
    if not over and cap is not None:  # the machines have room; a rank's own limit (ulimit -d / -v) has not
        return (f"training {cfg.model} {cfg.layers}x{cfg.hidden} on this part needs about {per_rank / GiB:.1f} GiB "
                f"per rank{rounds}, and a rank may hold only {cap / GiB:.1f} GiB (its process memory limit, "
                f"ulimit -d / -v); use more parts (ranks), a smaller --hidden, {more}or --halo-bits 8")
    i = over[0] if over else 0
    return (f"training {cfg.model} {cfg.layers}x{cfg.hidden} on this part needs about "
            f"{f['need_bytes_per_host'][i] / GiB:.1f} GiB on this machine ({f['ranks_per_host'][i]} rank(s)){rounds}, "
            f"and {f['room_bytes_per_host'][i] / GiB:.1f} GiB is available; use more parts (ranks), a smaller "
            f"--hidden, {more}or --halo-bits 8")
