"""index.md of a report: verdicts first, then the numbers, the failures, and how to reproduce.

What: :func:`report_markdown` renders a full report from its collection and summary document;
:func:`check_markdown` renders ``onlinesm check --report``. Both read numbers only from the
summary document, so the Markdown and summary.json never disagree.

Why this order: a kernel author wants the verdict in the first screen (kernel x dtype: pass or
fail, how close to the bound, on which family), then the detail to act on it.

Example:
    >>> fmt_num(0.000123), fmt_num("inf")
    ('0.000123', 'inf')
"""

from __future__ import annotations

from typing import Any

__all__ = ["report_markdown", "check_markdown", "fmt_num"]


def fmt_num(x: Any) -> str:
    """A number for a table: 3 significant digits; the schema's "inf"/"nan" strings as is."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.3g}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; a ``|`` inside a cell (a regex, an error message) is escaped."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def verdict_table(doc: dict[str, Any]) -> list[str]:
    """kernel x dtype cells: ``pass 0.41 (huge_spread)`` = status, worst bound use, its family."""
    dtypes = list(dict.fromkeys(v["dtype"] for v in doc["verdicts"]))
    keys = list(dict.fromkeys((v["op"], v["kernel"]) for v in doc["verdicts"]))
    cell = {(v["op"], v["kernel"], v["dtype"]): v for v in doc["verdicts"]}
    rows = []
    for op, k in keys:
        r = [op, f"`{k}`"]
        for d in dtypes:
            v = cell.get((op, k, d))
            if v is None:
                r.append("-")
                continue
            status = "pass" if v["status"] == "pass" else "**FAIL**"
            use = "" if v["worst_bound_use"] is None else f" {fmt_num(v['worst_bound_use'])}"
            fam = f" ({v['worst_family']})" if v.get("worst_family") else ""
            refused = f", refused {v['refused']}" if v.get("refused") else ""
            r.append(f"{status}{use}{fam}{refused}")
        rows.append(r)
    return _table(["op", "kernel"] + dtypes, rows)


def _env_lines(doc: dict[str, Any]) -> list[str]:
    env = doc["environment"]
    lines = ["## Settings and environment", "",
             f"- command: `{doc['command']}`",
             f"- created: {doc['created']} (UTC)",
             f"- device: {env['device']}" + (f" ({env['device_name']})" if env.get("device_name") else ""),
             "- versions: " + ", ".join(f"{k} {env.get(k) or 'not installed'}" for k in
                                        ("python", "numpy", "torch", "triton", "ml_dtypes", "onlinesm")),
             f"- platform: {env['platform']}"]
    s = doc["settings"]
    if doc["kind"] == "report":
        lines += [
            f"- dtypes: {', '.join(s['dtypes'])}; seeds per case: {s['seeds']} (base seed "
            f"{s['seed']}); rows per softmax case: {s['rows']}",
            f"- softmax row lengths: {', '.join(map(str, s['lengths']))}",
            f"- attention: batch 1, {s['heads']} heads, head dim {s['head_dim']}, key lengths "
            f"{', '.join(map(str, s['seqs']))} (Sq = Sk, except decode Sq = 1, causal Sq = Sk/2, "
            "masked_leading_tiles Sk >= 80)",
            f"- run time: {s.get('seconds', '-')} s",
        ]
    else:
        lines.append(f"- seed: {s.get('seed')}; dtypes: {', '.join(s.get('dtypes', []))}")
    return lines


def _fa3_lines(fa3: dict[str, Any], device: str) -> list[str]:
    shape = fa3["shape"]
    paper = fa3["paper"]["rmse"]
    lines = ["## FlashAttention-3's numerical-error table (its section 4.3)", "",
             f"Q, K, V ~ {fa3['distribution']}; RMSE of o against the {fa3['reference']}. "
             f"Shape here: batch {shape['batch']}, {shape['heads']} heads, sequence length "
             f"{shape['seq']}, head dim {shape['head_dim']} ({fa3['seeds']} draw(s)), on "
             f"{device}.", ""]
    rows = []
    for r in fa3["rows"]:
        cells = [fmt_num(r["rmse"].get(d)) for d in ("float16", "bfloat16")]
        note = r.get("note", "")
        if r.get("error"):  # the kernel did not run at the table's shape: say why
            cells = ["error", "error"]
            note = "; ".join(n for n in (note, f"did not run: {r['error'][:200]}") if n)
        rows.append([r["name"], *cells, note])
    for name, value in paper.items():
        rows.append([f"paper: {name}", fmt_num(value), "-", "H100, FlashAttention-3 paper"])
    lines += _table(["attention", "RMSE fp16", "RMSE bf16", "notes"], rows)
    lines += ["",
              "Reading it: the paper's point is the ratio, not the absolute values. Its baseline "
              "rounds S and P to fp16 at every step (3.2e-4); FlashAttention-2/3 keep the "
              "softmax statistics and the P·V accumulator in fp32 and round P once, to fp16, "
              "before the P·V matmul (1.9e-4). Differences from the paper's numbers come from: "
              "the shape (the paper's is given there; for random V, |o| shrinks about like "
              "1/sqrt(Sk) and the absolute errors with it, so compare ratios to the floor and "
              "to the baseline rather than absolute values); "
              "the hardware (the paper ran tensor-core matmuls on an H100; on the CPU, torch's "
              "fp16/bf16 matmuls accumulate in fp32 with a different summation order, and the "
              "Triton interpreter computes in numpy float32); the exp (numpy's and torch's CPU "
              "exp are accurate; the GPU's ex2.approx is a few ulp); and where P is rounded "
              "(the numpy reference keeps P in fp32; the Triton kernel and SDPA round it to "
              "the input dtype, as FlashAttention does). The first row is the floor: the exact "
              "o rounded once to the dtype; a kernel close to it loses little beyond its own "
              "output rounding. bf16 has 8 significand bits to "
              "fp16's 11, so its errors are about 8x larger in every row.", ""]
    return lines


def report_markdown(coll: Any, doc: dict[str, Any], *, plot_note: str = "") -> str:
    """The full report's index.md."""
    n = len(doc["verdicts"])
    n_pass = sum(v["status"] == "pass" for v in doc["verdicts"])
    env = doc["environment"]
    lines = [f"# onlinesm numerics report: {n_pass} of {n} kernel x dtype pass", "",
             f"{doc['created'][:10]}, {env['device']}"
             + (f" ({env['device_name']})" if env.get("device_name") else "")
             + f", torch {env.get('torch') or '-'}, triton {env.get('triton') or '-'}. "
             f"Schema `{doc['schema']}` in [summary.json](summary.json).", "",
             "## Verdicts", ""]
    lines += verdict_table(doc)
    lines += ["",
              "Each cell: **pass** when every element of every generated input is within the "
              "error bound the kernel's declared numerics allow (and fully masked rows follow "
              "its declared convention), else **FAIL**; then the worst *bound use* (error / "
              "allowed bound: 1 is the bound, 0.3 means the worst element used 30% of it) and "
              "the family it came from. The bound is derived from error analysis for each "
              "element (docs: `onlinesm.tolerance`), not a fixed rtol/atol. This report checks "
              "accuracy and the fully-masked convention; `onlinesm check` runs the whole "
              "property suite.", ""]
    lines += ["## Kernels and their declared numerics", ""]
    krows = []
    for k in doc["kernels"]:
        num = k["numerics"]
        krows.append([k["op"], f"`{k['name']}`", num["accumulate"], str(num["exp"]),
                      str(num.get("p_dtype")), k["fully_masked"], k.get("note", "")])
    lines += _table(["op", "kernel", "accumulate", "exp class", "P dtype", "fully masked",
                     "notes"], krows)
    lines.append("")
    if doc.get("fa3"):
        lines += _fa3_lines(doc["fa3"], env["device"])
    lines += ["## Plots", ""]
    if plot_note:
        lines += [plot_note, ""]
    for f in doc["files"]:
        if f.endswith(".png"):
            lines += [f"![{f}]({f})", ""]
    lines += ["## Per-family statistics", "",
              "ulp errors are in the ulps of the output dtype at the exact value; RMSE is the "
              "root mean square of the absolute error of the outputs; bound use as above. "
              "Families are the adversarial generators of `onlinesm.strategies`.", ""]
    stats = doc["stats"]
    for op in ("softmax", "attention"):
        for d in doc["settings"]["dtypes"]:
            ss = [s for s in stats if s["op"] == op and s["dtype"] == d]
            if not ss:
                continue
            lines += [f"### {op}, {d}", ""]
            rows = []
            for s in sorted(ss, key=lambda s: (s["family"], s["kernel"])):
                status = "pass" if s["status"] == "pass" else "**FAIL**"
                extra = []
                if not s["convention_ok"]:
                    extra.append("convention broken")
                if s["errors"]:
                    extra.append(f"{s['errors']} calls raised")
                if s["failed_elements"]:
                    extra.append(f"{s['failed_elements']} elements over the bound")
                rows.append([s["family"], f"`{s['kernel']}`", fmt_num(s["max_ulp"]),
                             fmt_num(s["p99_ulp"]), fmt_num(s["mean_ulp"]), fmt_num(s["rmse"]),
                             fmt_num(s["max_bound_use"]),
                             status + (" (" + "; ".join(extra) + ")" if extra else "")])
            lines += _table(["family", "kernel", "max ulp", "p99 ulp", "mean ulp", "RMSE",
                             "max bound use", "verdict"], rows)
            lines.append("")
    lines += ["## Failures", ""]
    if not doc["failures"]:
        lines += ["None: every kernel passed on every dtype.", ""]
    for f in doc["failures"]:
        lines += [f"### `{f['kernel']}` {f['op']} {f['dtype']}: {f['property']} "
                  f"(family {f['family']})", "", "Minimal counterexample:", "", "```",
                  f["message"].rstrip(), "```", ""]
        if f.get("replay"):
            lines += [f"Replay: `onlinesm replay {f['replay']}`", ""]
    lines += _env_lines(doc)
    lines += ["", "Reproduce: run the command above with the same versions; the inputs are "
              "seeded, so the numbers repeat on the same device and versions.", ""]
    return "\n".join(lines)


def check_markdown(result: Any, doc: dict[str, Any]) -> str:
    """index.md for ``onlinesm check --report``: verdicts, the property table, the failures."""
    verdict = "PASSED" if doc["passed"] else f"FAILED ({len(doc['failures'])} properties falsified)"
    lines = [f"# onlinesm check {result.op}: `{result.kernel}` {verdict}", "",
             f"Schema `{doc['schema']}` in [summary.json](summary.json).", "", "## Verdicts", ""]
    lines += verdict_table(doc)
    lines += ["", "## Properties", "", result.table(), "", "## Failures", ""]
    if not doc["failures"]:
        lines += ["None.", ""]
    for f in doc["failures"]:
        lines += [f"### {f['property']} [{f['dtype']}]" + (f" (family {f['family']})" if f["family"] else ""),
                  "", "```", f["message"].rstrip(), "```", ""]
        if f.get("replay"):
            lines += [f"Replay: `onlinesm replay {f['replay']}`", ""]
    lines += _env_lines(doc)
    lines.append("")
    return "\n".join(lines)
