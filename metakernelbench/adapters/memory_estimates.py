"""A final grade's GPU memory per problem, estimated on the CPU from the problem's shapes.

``footprint`` runs a problem's ``make_inputs``, its reference and its float64 anchor at the graded
workload without a GPU and without computing the large tensors: under a dispatch mode (``_Shadow``)
every tensor larger than ``SHADOW_BYTES``, and every product larger than ``SHADOW_FLOPS``, is made on
torch's ``meta`` device (shapes and dtypes, no data); smaller tensors are real CPU tensors, so the
index arithmetic a reference branches on (page tables, routing, counts) runs on real values. Every
storage's bytes are counted while it is alive, so the run gives the draw's bytes, the reference's and
the anchor's peaks above their inputs, and the outputs' bytes: the ``verifier.memory.Sizes`` of one
draw. A reference whose control flow needs the values of a large tensor cannot run this way;
``footprint`` then raises ``FootprintError`` and the table says so.

``estimate`` applies the grader's own plan (``verifier.memory.plan``) to those sizes for a card of
a given size: the peak with everything on the GPU, the least peak (everything that may leave the GPU
off it, ``verifier.memory.LEAST``), and the placement and peak the grader chooses. The README's table
of problems that do not fit an 80 GB card is generated from the record this module writes:

    python -m metakernelbench.adapters.memory_estimates --write     # results/cpu/grade-memory.json + README

The candidate kernel's own working memory is the submission's and is not in the estimate: what is
left of the card under the planned peak is what a kernel may use (``left_for_kernel``). The
estimates are a model (CUDA contexts and the caching allocator's rounding are approximations); the
peak measured on a GPU is recorded beside them (``python3 -m benchmarks.h200_problems --grade-peak``).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from metakernelbench.problem_kit import anchor_mode
from metakernelbench.problems import REPO_ROOT, Problem, load_problem, problem_paths
from metakernelbench.verifier import memory
from metakernelbench.verifier.tensors import clone_inputs, promote_floats, snapshot_graded

__all__ = [
    "CARD_BYTES", "END", "FootprintError", "MEASURED", "META", "README", "RECORD", "RELAXED", "SHADOW_BYTES",
    "SHADOW_FLOPS", "START", "estimate", "footprint", "main", "measured_peaks", "readme_block", "record",
    "write_readme",
]

SHADOW_BYTES = 512 << 20  # tensors above this are shapes only (meta)
SHADOW_FLOPS = 2e10  # products above this are shapes only, whatever their operands
# a reference that branches on a larger product (a router's logits) is run again with these
RELAXED = (2 << 30, 2e11)
META = torch.device("meta")
CARD_BYTES = 80 * memory.GB  # the card the README's table is for: an 80 GB H100
RECORD = REPO_ROOT / "results" / "cpu" / "grade-memory.json"
MEASURED = REPO_ROOT / "results" / "h200" / "problems.json"
README = REPO_ROOT / "README.md"
START, END = "<!-- grade-memory:start -->", "<!-- grade-memory:end -->"
_PRODUCTS = {"aten::mm": 0, "aten::addmm": 1, "aten::bmm": 0, "aten::baddbmm": 1, "aten::addbmm": 1}


class FootprintError(RuntimeError):
    """The problem's code needs values of a tensor that the estimate holds as shapes only."""


def _product_flops(func, args) -> float:
    """Multiply-adds x 2 of a matrix product (0 for anything else)."""
    at = _PRODUCTS.get(func._schema.name)
    if at is None:
        return 0.0
    a, b = args[at], args[at + 1]
    batch = a.shape[0] if a.dim() == 3 else 1
    return 2.0 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


_INDEXING = ("aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_")


def _masks_as_positions(func, args):
    """A real boolean mask indexing a shapes-only tensor, as the positions it selects (the result's
    shape then follows from the mask's real values: ``x[mask]`` is ``x[mask.nonzero(as_tuple=True)]``)."""
    if func._schema.name not in _INDEXING or len(args) < 2 or not isinstance(args[1], list | tuple):
        return args
    indices = []
    for index in args[1]:
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool and index.device != META:
            indices.extend(index.nonzero(as_tuple=True))
        else:
            indices.append(index)
    return (args[0], indices, *args[2:])


def _on_meta(args, kwargs):
    margs, mkwargs = tree_map(lambda a: a.to(META) if isinstance(a, torch.Tensor) and a.device != META else a,
                              (args, kwargs))
    mkwargs = dict(mkwargs)
    if "generator" in mkwargs:
        mkwargs["generator"] = None
    if "device" in mkwargs:
        mkwargs["device"] = META
    if mkwargs.get("pin_memory"):
        mkwargs["pin_memory"] = False
    return margs, mkwargs


class _Shadow(TorchDispatchMode):
    """Large tensors as shapes only, small ones real, every storage's bytes counted while alive."""

    def __init__(self, shadow_bytes: int = SHADOW_BYTES, shadow_flops: float = SHADOW_FLOPS) -> None:
        super().__init__()
        self.shadow_bytes, self.shadow_flops = shadow_bytes, shadow_flops
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.high = 0
        self.shapes_only = 0  # results made as shapes only

    def sweep(self) -> int:
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(key)[1]
        return self.current

    def mark(self) -> int:
        """Start a new peak from what is alive now; returns that."""
        self.high = self.sweep()
        return self.high

    def _count(self, out) -> None:
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage._cdata
                if key in self.live and not self.live[key][0].expired():
                    continue
                if key in self.live:
                    self.current -= self.live.pop(key)[1]
                self.live[key] = (StorageWeakRef(storage), storage.nbytes())
                self.current += storage.nbytes()
        self.high = max(self.high, self.current)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.sweep()
        tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        shadowed = any(t.device == META for t in tensors)
        if not shadowed:
            try:  # its shapes first: a large result is made as shapes only
                margs, mkwargs = _on_meta(args, kwargs)
                trial = func(*margs, **mkwargs)
                size = sum(t.untyped_storage().nbytes() for t in tree_flatten(trial)[0] if isinstance(t, torch.Tensor))
            except Exception:  # noqa: BLE001 - no meta kernel (bincount, nonzero): small inputs, run it
                trial, size = None, 0
            mutates = func._schema.is_mutable
            large = size > self.shadow_bytes or _product_flops(func, args) > self.shadow_flops
            if trial is not None and not mutates and large:
                out = trial
                self.shapes_only += 1
            else:
                out = func(*args, **kwargs)
        else:
            margs, mkwargs = _on_meta(_masks_as_positions(func, args), kwargs)
            try:
                out = func(*margs, **mkwargs)
                self.shapes_only += 1
            except Exception as exc:  # noqa: BLE001
                raise FootprintError(f"{func._schema.name} needs the values of a tensor held as shapes only: "
                                     f"{type(exc).__name__}: {str(exc)[:200]}") from None
            if func._schema.is_mutable and tensors and args and isinstance(args[0], torch.Tensor) \
                    and args[0].device != META:
                out = args[0]  # a real tensor updated from shapes: its memory is what counts, not its values
        self._count(out)
        return out


def footprint(problem: Problem, workload: dict[str, Any] | None = None, seed: int = 0) -> memory.Sizes:
    """The ``Sizes`` of one draw of ``problem`` at ``workload`` (the graded one by default), on the CPU;
    a problem that branches on a tensor held as shapes only is tried again with ``RELAXED`` limits."""
    try:
        return _footprint(problem, workload, seed, _Shadow())
    except FootprintError:
        return _footprint(problem, workload, seed, _Shadow(*RELAXED))


def _footprint(problem: Problem, workload: dict[str, Any] | None, seed: int, shadow: _Shadow) -> memory.Sizes:
    spec = problem.spec
    workload = spec.workload if workload is None else workload
    try:
        with torch.no_grad(), shadow:
            inputs = problem.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(seed), **workload)
            shadow.sweep()
            draw = memory.storage_bytes(inputs)
            by_name = dict(zip(spec.inputs, inputs, strict=True))
            inplace = sum(memory.nbytes(by_name[n]) for n in spec.inplace)
            work = clone_inputs(inputs)
            before = shadow.mark()
            ref = snapshot_graded(spec, work, problem.reference(*work))
            shadow.sweep()
            reference_work = shadow.high - before
            outputs = sum(memory.nbytes(ref[n]) for n in spec.outputs)
            items = memory.compare_items(ref, spec.exact)
            del work, ref
            promoted = promote_floats(inputs)
            anchor_inputs = memory.promoted_bytes(inputs)
            del inputs, by_name
            before = shadow.mark()
            with anchor_mode():
                anchor = snapshot_graded(spec, promoted, problem.reference(*promoted))
            shadow.sweep()
            anchor_work = shadow.high - before
            anchor_outputs = sum(memory.nbytes(t) for t in anchor.values())
    except FootprintError:
        raise
    except Exception as exc:  # noqa: BLE001 - a value read from a shapes-only tensor, or an op without shapes
        raise FootprintError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
    return memory.Sizes(draw=draw, outputs=outputs, inplace=inplace, reference_work=reference_work,
                        anchor_inputs=anchor_inputs, anchor_work=anchor_work, anchor_outputs=anchor_outputs,
                        compare_items=items)


def _why(sizes: memory.Sizes, stages: dict[str, int]) -> str:
    """The largest stage of the least placement and what fills it."""
    stage = max(stages, key=stages.get)
    gb = lambda n: f"{n / memory.GB:.1f} GB"  # noqa: E731
    if stage == "eager call":
        return (f"the eager reference's own working memory ({gb(sizes.reference_work)}) beside three copies of a "
                f"draw of {gb(sizes.draw)} (both workers' input buffers and the draw written into them)")
    if stage in ("timed call", "correctness call"):
        return (f"the input buffers of both workers and the draw written into them ({gb(3 * sizes.draw)}) and the "
                f"kernel's outputs ({gb(sizes.outputs)})")
    return (f"the eager reference's working memory ({gb(sizes.reference_work)}) on a fresh draw of {gb(sizes.draw)} "
            f"beside the input buffers held meanwhile")


def estimate(problem: Problem, card: int = CARD_BYTES) -> dict[str, Any]:
    """One problem's row: its sizes, the all-on-GPU and least peaks, the plan for ``card`` bytes."""
    row: dict[str, Any] = {"problem": problem.spec.name}
    started = time.perf_counter()
    try:
        sizes = footprint(problem)
    except FootprintError as exc:
        row["error"] = str(exc)
        return row
    chosen = memory.plan(sizes, card)
    least = memory.stage_peaks(sizes, memory.LEAST)
    row.update({
        "sizes_gb": {k: (round(v / memory.GB, 3) if isinstance(v, int) else v)
                     for k, v in asdict(sizes).items() if k not in ("compare_items", "timed")},
        "kept_outputs_gb": round(sizes.kept / memory.GB, 3),
        "all_on_gpu_gb": round(memory.peak(sizes, memory.ALL_ON_DEVICE) / memory.GB, 2),
        "least_gb": round(max(least.values()) / memory.GB, 2),
        "planned_gb": round(chosen.peak / memory.GB, 2),
        "placement": asdict(chosen.placement),
        "fits": chosen.fits,
        "left_for_kernel_gb": round(chosen.left_for_kernel / memory.GB, 2),
        "stages_gb": {k: round(v / memory.GB, 2) for k, v in chosen.stages.items()},
    })
    row["seconds"] = round(time.perf_counter() - started, 1)  # printed, not recorded (``record``)
    if not chosen.fits:
        row["why"] = _why(sizes, least)
    return row


def record(only: set[str] | None = None, card: int = CARD_BYTES, progress=None) -> dict[str, Any]:
    """Every problem's row (``only``: these); ``progress`` is called with each row as it is made."""
    rows = []
    for path in problem_paths():
        if not only or path.stem[:2] in only:
            rows.append(estimate(load_problem(path), card))
            if progress is not None:
                progress(rows[-1])
            rows[-1].pop("seconds", None)
    return {"card_gb": card / memory.GB, "usable_fraction": 1 - memory.RESERVE,
            "context_bytes": memory.CONTEXT_BYTES, "flush_bytes": memory.FLUSH_BYTES,
            "command": "python -m metakernelbench.adapters.memory_estimates --write",
            "torch": torch.__version__, "problems": rows}


def _measured(problem: str, measured: dict[str, dict]) -> str:
    peaks = measured.get(problem) or {}
    shown = [f"{dsl} {gib:.1f} GiB" for dsl, gib in sorted(peaks.items()) if gib is not None]
    return ", ".join(shown) or "not yet"


def measured_peaks(path: Path = MEASURED) -> dict[str, dict]:
    """Per problem, the final-grade peaks ``python3 -m benchmarks.h200_problems --grade-peak`` recorded."""
    if not path.is_file():
        return {}
    return {r["problem"]: r.get("final_grade_peak_gib") or {} for r in json.loads(path.read_text())["problems"]}


def readme_block(rec: dict[str, Any], measured: dict[str, dict] | None = None) -> str:
    """The README's table: every problem whose grade with everything on the GPU takes more than half
    the card, or whose plan moves something off it, and which problems need a larger card, with why."""
    card, measured = rec["card_gb"], measured or {}
    rows = [r for r in rec["problems"] if "error" not in r]
    shown = [r for r in rows if r["all_on_gpu_gb"] > card / 2 or r["placement"] != asdict(memory.ALL_ON_DEVICE)]
    larger = [r for r in rows if not r["fits"]]
    lines = [f"Estimated on the CPU from each problem's shapes for a {card:g} GB card, "
             f"{100 * rec['usable_fraction']:.0f} % of it planned "
             "(`python -m metakernelbench.adapters.memory_estimates --write`, `results/cpu/grade-memory.json`; "
             "GB = 1e9 bytes), for every problem whose grade takes more than half of it with everything on the GPU "
             "or whose plan moves something off the GPU. *All on GPU*: the grade with every tensor on the GPU "
             "(as before its placement was planned); *planned*: with the placement the grader chooses; *least*: "
             "with everything that may leave the GPU off it. A kernel's own working memory comes on top: *room* is "
             "what its calls have left. *Measured*: the largest used memory a final grade of the oracle showed "
             "(`results/h200/problems.json`, `final_grade_peak_gib`).", "",
             "| problem | draw | float64 anchor inputs | 50 kept outputs | all on GPU | planned | least "
             "| off the GPU | room | measured |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in shown:
        p, s = row["placement"], row["sizes_gb"]
        off = [label for key, label in (("keep_on_device", "kept outputs"), ("expected_on_host", "expected values"),
                                        ("compare_on_device", "comparison"), ("anchor_on_device", "anchor"))
               if p[key] != asdict(memory.ALL_ON_DEVICE)[key]]
        lines.append(f"| {row['problem'][:2]} | {s['draw']:.1f} | {s['anchor_inputs']:.1f} "
                     f"| {row['kept_outputs_gb']:.1f} | {row['all_on_gpu_gb']:.1f} | {row['planned_gb']:.1f} "
                     f"| {row['least_gb']:.1f} | {', '.join(off) or '-'} | {row['left_for_kernel_gb']:.1f} "
                     f"| {_measured(row['problem'], measured)} |")
    lines.append("")
    if larger:
        lines.append(f"Need more than {card:g} GB: " + "; ".join(f"{r['problem'][:2]} ({r['why']})" for r in larger)
                     + ".")
    else:
        lines.append(f"No problem needs more than {card:g} GB by this estimate: at most "
                     f"{max(r['least_gb'] for r in rows):.1f} GB with everything off the GPU that may leave it, "
                     "the rest being the input buffers of both workers, the draw written into them and the eager "
                     "reference's own working memory.")
    failed = [r["problem"][:2] for r in rec["problems"] if "error" in r]
    if failed:
        lines.append(f"Not estimated (the reference branches on values of a tensor the estimate holds as shapes only): "
                     f"{', '.join(failed)}.")
    return "\n".join(lines)


def write_readme(rec: dict[str, Any], readme: Path = README) -> None:
    text = readme.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{readme_block(rec, measured_peaks())}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="NN,NN: these problems only (printed, nothing written)")
    parser.add_argument("--write", action="store_true", help=f"write {RECORD.relative_to(REPO_ROOT)} and the README")
    parser.add_argument("--readme", action="store_true",
                        help="only rewrite the README's block from the records (after a GPU run measured peaks)")
    args = parser.parse_args(argv)
    if args.readme:
        write_readme(json.loads(RECORD.read_text()))
        return 0
    only = {x for x in args.only.split(",") if x} or None
    rec = record(only, progress=lambda row: print(json.dumps(
        {k: row.get(k) for k in ("problem", "all_on_gpu_gb", "least_gb", "planned_gb", "fits", "error", "seconds")}),
        flush=True))
    if args.write and not only:
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        RECORD.write_text(json.dumps(rec, indent=1) + "\n")
        write_readme(rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
