"""What a check found: one :class:`PropertyOutcome` per (property, dtype), and the failures.

The statuses a cell of the table can take, and what each promises:

- ``passed``: the property held on every example that tested something (``pass (N)``);
- ``failed``: falsified; the :class:`Failure` holds the minimal input and a replay file. A
  contract breach met in several properties is one failure that lists the others;
- ``waived``: the kernel declared it waived, with a reason;
- ``na``: it cannot be tested inside the declared domain, or every input was refused or tested
  nothing: ``n/a (reason)``, never a pass;
- ``not_run``: the run stopped before it (the kernel hung);
- ``suspect``: a one-ulp bf16 miss that Triton's interpreter may have caused.

Example:
    >>> o = PropertyOutcome("accuracy", "float32", "na", reason="needs masks")
    >>> CheckResult("softmax", "k", {}, [o], 0, "cpu").table().splitlines()[-1]
    '| accuracy | n/a (needs masks) |'
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Failure", "PropertyOutcome", "CheckResult", "STATUSES"]

#: Every status an outcome can have (see the module docstring).
STATUSES = ("passed", "failed", "waived", "na", "not_run", "suspect")


@dataclasses.dataclass
class Failure:
    """One falsified property: the minimal input, the message, and how to replay it."""

    property: str
    dtype: str
    message: str
    inputs: dict[str, Any]
    family: str = ""
    replay_path: str | None = None
    #: (kind, detail) when the failure is a breach of the call contract, else None
    breach: tuple[str, str] | None = None
    #: other (property, dtype) where the same breach was met: reported once, here
    also: list[str] = dataclasses.field(default_factory=list)

    def text(self) -> str:
        head = f"FAILED {self.property} [{self.dtype}]" + (f" (family {self.family})" if self.family else "")
        if self.also:
            head += f": the same breach in {len(self.also) + 1} properties ({', '.join(self.also)} too)"
        tail = f"\n  replay: onlinesm replay {self.replay_path}" if self.replay_path else ""
        body = "\n".join("  " + line for line in self.message.splitlines())
        return f"{head}\n{body}{tail}"


@dataclasses.dataclass
class PropertyOutcome:
    """The verdict of one property on one dtype."""

    property: str
    dtype: str
    status: str  # one of STATUSES
    examples: int = 0
    seconds: float = 0.0
    reason: str = ""
    failure: Failure | None = None
    #: inputs the kernel refused with a declared refusal, in all and per family
    rejected: int = 0
    rejected_by_family: dict[str, int] = dataclasses.field(default_factory=dict)
    #: examples that tested nothing (no fully masked row for fully_masked, ...)
    untested: int = 0

    def cell(self) -> str:
        """The table cell: ``pass (20)``, ``pass (12, rejected 8)``, ``**FAIL**``, ``n/a (why)``."""
        extra = f", rejected {self.rejected}" if self.rejected else ""
        return {"passed": f"pass ({self.examples}{extra})", "failed": "**FAIL**",
                "waived": "waived", "na": f"n/a ({self.reason})", "not_run": "not run",
                "suspect": "interpreter-suspect"}[self.status]


@dataclasses.dataclass
class CheckResult:
    """What a check found: one outcome per (property, dtype), and the failures."""

    op: str
    kernel: str
    conventions: dict[str, Any]
    outcomes: list[PropertyOutcome]
    seed: int | None
    device: str
    #: the input the kernel hung on, when it did (the run stopped there)
    hung: str | None = None
    #: Triton compilations the run caused: count, seconds, autotune_runs, summary
    compiles: dict[str, Any] | None = None
    #: regression mode: the RMSE table new vs old per dtype (FlashAttention-3's layout)
    tables: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(o.status in ("failed", "not_run") for o in self.outcomes)

    @property
    def nothing_tested(self) -> bool:
        """Every property that was not waived is n/a: nothing could be tested."""
        live = [o for o in self.outcomes if o.status != "waived"]
        return bool(live) and all(o.status == "na" for o in live)

    @property
    def failures(self) -> list[Failure]:
        """Every distinct failure (a breach met by several properties is listed once)."""
        return [o.failure for o in self.outcomes if o.failure is not None]

    def table(self) -> str:
        """Properties x dtypes, each cell pass / FAIL / waived, as a Markdown table."""
        dtypes = list(dict.fromkeys(o.dtype for o in self.outcomes))
        props = list(dict.fromkeys(o.property for o in self.outcomes))
        cell = {(o.property, o.dtype): o for o in self.outcomes}
        lines = ["| property | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
        for p in props:
            row = []
            for d in dtypes:
                o = cell.get((p, d))
                row.append("-" if o is None else o.cell())
            lines.append(f"| {p} | " + " | ".join(row) + " |")
        return "\n".join(lines)

    def report(self) -> str:
        """The full text: the table, every failure, and the waivers with their reasons."""
        falsified = sum(1 + len(f.also) for f in self.failures)
        verdict = "PASSED" if self.passed else f"FAILED ({falsified} properties falsified)"
        if self.hung:
            verdict = f"FAILED (the kernel hung on {self.hung}; the run stopped there)"
        parts = [f"onlinesm check {self.op}: {self.kernel} on {self.device}: {verdict}", "", self.table()]
        for t in self.tables:
            parts += ["", t, ""]
        waived = {(o.property, o.reason) for o in self.outcomes if o.status == "waived"}
        for prop, reason in sorted(waived):
            parts.append(f"waived {prop}: {reason}")
        for o in self.outcomes:
            if o.status == "suspect":
                parts.append(f"interpreter-suspect {o.property} [{o.dtype}]: {o.reason}")
        not_run = [f"{o.property} [{o.dtype}]" for o in self.outcomes if o.status == "not_run"]
        if not_run:
            reason = next(o.reason for o in self.outcomes if o.status == "not_run")
            parts.append(f"not run ({reason}): {', '.join(not_run)}")
        if self.compiles and (self.compiles.get("count") or self.device == "cuda"):
            parts.append(f"compiles: {self.compiles['summary']}")
        refused: dict[str, int] = {}
        for o in self.outcomes:
            for fam, k in o.rejected_by_family.items():
                refused[fam] = refused.get(fam, 0) + k
        if refused:
            parts.append("rejected (declared refusals) per family: "
                         + ", ".join(f"{f or 'explicit'} {k}" for f, k in sorted(refused.items())))
        for f in self.failures:
            parts += ["", f.text()]
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, in the results schema shared with ``onlinesm report``."""
        return {
            "op": self.op,
            "kernel": self.kernel,
            "device": self.device,
            "seed": self.seed,
            "passed": self.passed,
            "conventions": self.conventions,
            "outcomes": [
                {"property": o.property, "dtype": o.dtype, "status": o.status,
                 "examples": o.examples, "seconds": round(o.seconds, 3), "reason": o.reason,
                 "rejected": o.rejected, "rejected_by_family": dict(o.rejected_by_family),
                 "untested": o.untested,
                 "failure": None if o.failure is None else {
                     "message": o.failure.message, "family": o.failure.family,
                     "replay": o.failure.replay_path}}
                for o in self.outcomes
            ],
            "hung": self.hung,
            "compiles": self.compiles,
        }
