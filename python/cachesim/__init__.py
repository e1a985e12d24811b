"""cachesim from Python: the same simulator as the ``cachesim`` command line, over the same core.

Every function takes the flags of its subcommand as keyword arguments, with the command line's
names (``-`` written ``_``), defaults and checks — they are parsed by the command line's own
definitions, so they cannot drift::

    import cachesim
    r = cachesim.run(max_num_seqs=64, request_rate=8)      # the bundled sample, vLLM on an H100
    r.summary["output_throughput"]                          # the keys of `cachesim run --json`
    r.requests                                              # one row per request (pandas)
    w = cachesim.Workload.from_file("conv.jsonl")           # read and tokenise once ...
    [cachesim.run(workload=w, max_num_seqs=n) for n in (16, 64, 256)]   # ... run many times

``sweep`` runs a grid of configurations locally or as Ray tasks; ``plan``, ``calibrate`` and
``validate`` run those commands through the command line's own code and return its ``--json``
documents. A switch (``--enable-chunked-prefill``)
takes ``True``/``False``; ``None`` leaves a flag at its default; a list is a comma-separated value.
Errors are :class:`Error` (a ``ValueError``) or its subclasses :class:`TraceError` (with ``path``,
``line`` and ``field``) and :class:`StartupRefused`, carrying the command line's message; an
unknown keyword is a ``TypeError``.
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import _native
from ._native import Error, StartupRefused, TraceError

__all__ = [
    "run",
    "cache",
    "analyze",
    "sweep",
    "plan",
    "calibrate",
    "validate",
    "command",
    "Workload",
    "Result",
    "Error",
    "TraceError",
    "StartupRefused",
    "run_flags",
    "trace_flags",
    "SAMPLE_TRACE_NAME",
]

__version__ = _native.CORE_VERSION
SAMPLE_TRACE_NAME: str = _native.SAMPLE_TRACE_NAME

PathLike = Union[str, "os.PathLike[str]"]
_zip = zip  # `sweep` takes a `zip=` argument, as `cachesim sweep --zip`


def run_flags() -> List[str]:
    """Every long flag of ``cachesim run`` (each is a keyword of :func:`run`, ``-`` as ``_``)."""
    # `--seeds` is `run`'s alone (sweeps and plans take the other flags): see :func:`run`.
    return list(_native.run_flags()) + ["seeds"]


def trace_flags() -> List[str]:
    """The keywords that say how a trace is read and tokenised (they belong to a :class:`Workload`)."""
    return list(_native.trace_flags())


def _frame(columns: Optional[Dict[str, list]]):
    """Columns as a pandas DataFrame when pandas is installed, else as a list of row dicts."""
    if columns is None:
        return None
    try:
        import pandas as pd
    except ImportError:
        keys = list(columns)
        n = len(columns[keys[0]]) if keys else 0
        return [{k: columns[k][i] for k in keys} for i in range(n)]
    return pd.DataFrame(columns)


class Workload:
    """A trace read and tokenised once, shared by every run handed it (no copy of its tokens).

    Pickles (for Ray's object store, or multiprocessing) as the trace's bytes plus the flags it
    was read with; the receiving process parses and tokenises it again, once per process.
    """

    __slots__ = ("_native",)

    def __init__(self, native: "_native.NativeWorkload"):
        self._native = native

    @classmethod
    def from_file(cls, path: Optional[PathLike] = None, **flags: Any) -> "Workload":
        """Reads ``path`` (``.gz`` transparently; ``None``: the bundled sample).

        ``flags`` are the trace flags of ``cachesim run`` (``format``, ``lenient``, ``tokenizer``,
        ``turns``, ``sharegpt_output_len``, ``dataset_filter``, ``sharegpt_context_len``,
        ``trace_block_size``) and ``report_style``, whose client's ShareGPT sample
        ``turns="first"`` takes by default; and ``priority_mix``, ``lora_modules`` and
        ``lora_assignment`` with the ``seed`` of their draws, which a run of the workload then uses
        too (as ``--priority-mix``, ``--lora-modules`` and ``--seed`` do on the command line). Raises :class:`TraceError` with the file, line and field of a bad record.
        """
        p = None if path is None else os.fspath(path)
        return cls(_native.NativeWorkload.load(p, flags))

    @property
    def path(self) -> str:
        """The trace's name in reports."""
        return self._native.path

    @property
    def info(self) -> Dict[str, Any]:
        """What it was built from: the ``trace`` object of ``cachesim run --json``."""
        return self._native.info()

    @property
    def requests(self):
        """The requests (prompt and output lengths, arrival, session): a DataFrame or list of dicts."""
        return _frame(self._native.requests())

    def __len__(self) -> int:
        return len(self._native)

    def __repr__(self) -> str:
        return f"<cachesim.Workload {self.path!r}: {len(self)} requests>"

    def __reduce__(self):
        name, data, argv = self._native.state()
        return (_restore_workload, (name, data, argv))


def _restore_workload(name: str, data: Optional[bytes], argv: List[str]) -> Workload:
    return Workload(_native.NativeWorkload.restore(name, data, argv))


class Result:
    """One simulation: ``summary`` (the ``cachesim run --json`` document), ``requests`` and
    ``steps`` (DataFrames, or lists of dicts without pandas), ``notes`` and ``failures``."""

    __slots__ = ("_native", "_summary")

    def __init__(self, native: "_native.NativeResult"):
        self._native = native
        self._summary = None

    @property
    def summary(self) -> Dict[str, Any]:
        """The dict ``cachesim run --json`` prints for the same flags: sglang's result keys
        (``output_throughput``, ``median_ttft_ms``, …), then ``requests_sent``, ``failed_reasons``,
        ``hit_ratio``, ``saturation``, ``cache``, ``steps``, ``trace`` and ``config``."""
        if self._summary is None:
            self._summary = self._native.report()
        return self._summary

    @property
    def requests(self):
        """One row per completed request, as ``--requests-csv`` writes them (times in seconds)."""
        return _frame(self._native.requests())

    @property
    def steps(self):
        """One row per engine step, as ``--timeline-csv`` writes them (None with keep_steps=False)."""
        return _frame(self._native.steps())

    @property
    def token_times(self):
        """One row per output token, as ``--token-times-csv`` writes them (only when it was given)."""
        return _frame(self._native.token_times())

    @property
    def notes(self) -> List[str]:
        """What resolving the configuration changed unasked (the command line's ``note:`` lines)."""
        return list(self._native.notes)

    @property
    def failures(self) -> Dict[str, tuple]:
        """Failed requests by reason: ``{reason: (count, the engine's message)}``."""
        return {r: (n, m) for r, n, m in self._native.failures()}

    def __getitem__(self, key: str) -> Any:
        return self.summary[key]

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"<cachesim.Result {s['completed']} requests: {s['output_throughput']:.1f} output tok/s, "
            f"median TTFT {s['median_ttft_ms']:.1f} ms, median TPOT {s['median_tpot_ms']:.2f} ms>"
        )


def run(
    trace: Optional[PathLike] = None,
    engine: Optional[str] = None,
    *,
    workload: Optional[Workload] = None,
    keep_steps: bool = True,
    **flags: Any,
) -> Result:
    """Simulates serving a trace, as ``cachesim run`` does.

    ``trace``: a trace file (``None``: the bundled sample); ``engine``: ``vllm``, ``vllm-v0``,
    ``sglang`` or ``lightllm``; ``flags``: any other flag of ``cachesim run --help`` with ``_`` for
    ``-`` (``max_num_seqs=64``, ``request_rate=8``, ``engine_version="vllm@0.18"``,
    ``enable_chunked_prefill=True``), same defaults. ``workload``: a :class:`Workload` loaded once
    (then leave out ``trace`` and the trace flags). ``keep_steps=False`` skips the per-step
    records. Output-file flags (``requests_csv``, ``plot``, …) write their files as the command
    line does. The simulation runs without the GIL.

    ``no_step_coalescing=True`` simulates every engine step as an event of its own (the same
    result; for checks and timings).

    ``seeds=N`` (N > 1) runs ``cachesim run --seeds N --json`` through the command line's own code
    and returns its document, a dict: every metric as ``{median, min, max, interval, per_seed}``
    over the seeds ``seed``, …, ``seed + N - 1``, and ``seeds["varied"]``, what the seed drew
    (docs/guide/run.md, Seeds); it reads the trace itself, so it takes ``trace=``, not
    ``workload=``. ``seeds=1`` is the plain run.

    Raises :class:`Error` for what the command line refuses (also when every request failed:
    the exception's ``result`` attribute holds the :class:`Result`).
    """
    if trace is not None:
        if workload is not None:
            raise TypeError("run(): give trace= or workload=, not both")
        flags["trace"] = trace
    if engine is not None:
        flags["engine"] = engine
    every_step = flags.pop("no_step_coalescing", False)
    if not isinstance(every_step, bool):
        raise Error(f"no_step_coalescing={every_step!r}: a switch takes True or False")
    if every_step:
        flags["no_step_coalescing"] = True  # for the command line's run under seeds=N
    seeds = flags.pop("seeds", None)
    if seeds is not None and seeds != 1:
        if workload is not None:
            raise TypeError(
                "run(seeds=N) runs the command line, which reads the trace itself: give trace=, not workload="
            )
        flags["seeds"] = seeds
        return _document("run", flags)
    flags.pop("no_step_coalescing", None)
    native = _native.run(None if workload is None else workload._native, flags, keep_steps, every_step)
    result = Result(native)
    if _native.all_failed(native):
        err = Error("All requests failed. This is likely due to a misconfiguration on the benchmark arguments.")
        err.result = result
        raise err
    return result


def cache(trace: Optional[PathLike] = None, *, workload: Optional[Workload] = None, **flags: Any) -> Dict[str, Any]:
    """Replays a trace through prefix caches without timing: the ``cachesim cache --json`` dict.

    ``flags`` as ``cachesim cache --help``: ``policy="paged,radix"`` or ``["paged", "radix"]``,
    ``block=[16, 32]``, ``capacity_tokens=["unlimited", "20k"]``, ``inflight``, trace flags.
    """
    if trace is not None:
        if workload is not None:
            raise TypeError("cache(): give trace= or workload=, not both")
        flags["trace"] = trace
    return _native.cache(None if workload is None else workload._native, flags)


def command(name: str, **flags: Any) -> str:
    """Runs ``cachesim NAME`` with ``flags`` through the command line's own code (its deployment
    files, grid axes, checks and dispatch) and returns what it printed to stdout."""
    return _native.command(name, flags)


def _document(name: str, flags: Dict[str, Any]) -> Any:
    flags.setdefault("json", True)
    text = command(name, **flags)
    if not flags.get("json"):
        return text
    import json

    return json.loads(text)


def plan(trace: Optional[PathLike] = None, **flags: Any) -> Dict[str, Any]:
    """The highest request rate each configuration sustains under an SLO, or with
    ``target_rate`` and ``gpus``/``tp``/``instances``/``gpu_price`` the cheapest deployment:
    the ``cachesim plan --json`` document (``slo="ttft_p99=1000,tpot_p99=30"``,
    ``grid=["max-num-seqs=16,64"]``, any run flag)."""
    if trace is not None:
        flags["trace"] = trace
    return _document("plan", flags)


def calibrate(**flags: Any) -> Any:
    """``cachesim calibrate``: ``report=FILE`` gives the input report as read (the ``--json``
    dict); ``report=FILE, out=PROFILE, …run flags`` or ``fit=True, cases=…, out=PROFILE`` fit a
    calibration profile and return the command's text (the profile is the file written)."""
    if flags.get("out") is not None or flags.get("fit"):
        flags.setdefault("json", False)
    return _document("calibrate", flags)


def validate(**flags: Any) -> Dict[str, Any]:
    """``cachesim validate``: the cases of ``calibration/cases`` (or ``cases_dir``, ``cases``)
    simulated and compared with their measurements, as the ``--json`` document (``data=`` the
    data folder; ``leave_one_out=True``, ``leave_group_out="gpu"``, …)."""
    return _document("validate", flags)


def analyze(trace: Optional[PathLike] = None, **flags: Any) -> Dict[str, Any]:
    """Prefix repetition and hit-ratio bounds of a data set: the ``cachesim analyze --json`` dict."""
    if trace is not None:
        flags["trace"] = trace
    return _document("analyze", flags)


def _typed(text: str, originals: Mapping[str, Any]) -> Any:
    """A grid value as the user gave it (ints for expanded ranges, text otherwise)."""
    if text in originals:
        return originals[text]
    try:
        return int(text)
    except ValueError:
        return text


def sweep(
    grid: Mapping[str, Union[Sequence[Any], str]],
    workload: Optional[Workload] = None,
    backend: str = "local",
    rank_by: str = "output_throughput",
    *,
    ascending: Optional[bool] = None,
    zip: Optional[Mapping[str, Sequence[Any]]] = None,
    trace: Optional[PathLike] = None,
    tasks: Optional[int] = None,
    **flags: Any,
):
    """Runs a grid of configurations over one workload and ranks them, as ``cachesim sweep``.

    ``grid``: flag → list of values (or a range string ``"2048..8192:1024"``); the cartesian
    product, the first key varying slowest. ``zip``: flag → list, taken together value by value
    as the last axis. ``flags``: the base run flags every point starts from. ``workload``: a
    :class:`Workload` (default: ``trace`` read with the trace flags among ``flags``).
    ``rank_by``: a key of ``cachesim run --json``; ``ascending`` defaults to smaller-is-better for
    latencies, duration, failed and preemptions.

    ``backend="local"`` runs the points in parallel in this process (no GIL); ``backend="ray"``
    runs them as Ray tasks (``tasks`` of them, default 4 per CPU of the cluster, at most one per
    point), the workload put in the object store once — on the local Ray, or the cluster
    ``ray.init(address=...)`` joined before the call. Both give the same table.

    Returns a DataFrame (a list of dicts without pandas), best first: ``rank``, ``point`` (grid
    index), the knobs (named as in ``grid``), every metric key, ``error`` (a refused point's
    reason), ``within_error_of_best`` (whether its error bar on ``rank_by`` overlaps the best
    point's, as the table's ``near #1``; ``None`` without bars). ``.attrs`` (DataFrame) holds ``table`` (the command line's ranked table),
    ``rank_by`` and ``ascending``.
    """
    _native.check_metric(rank_by)
    trace_keys = set(trace_flags())
    base = {k: v for k, v in flags.items() if k not in trace_keys}
    if workload is None:
        read = {k: v for k, v in flags.items() if k in trace_keys}
        if "report_style" in flags:
            read["report_style"] = flags["report_style"]
        workload = Workload.from_file(trace, **read)
    elif trace is not None or any(k in trace_keys for k in flags):
        raise TypeError("sweep(): with workload=, leave out trace= and the trace flags (they belong to the Workload)")

    def axes(m: Optional[Mapping[str, Any]]):
        out, originals = [], {}
        for knob, values in (m or {}).items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                values = [values]
            texts = []
            for v in values:
                t = ("true" if v else "false") if isinstance(v, bool) else str(v)
                texts.append(t)
                originals.setdefault(knob, {})[t] = v
            out.append((knob, texts))
        return out, originals

    grid_axes, originals = axes(grid)
    zip_axes, zip_originals = axes(zip)
    originals.update(zip_originals)
    names = [k for k, _ in grid_axes] + [k for k, _ in zip_axes]
    knobs, points = _native.sweep_points(workload._native, grid_axes, zip_axes, base)

    if backend == "local":
        rows = _native.sweep_run(workload._native, points, base)
    elif backend == "ray":
        rows = _ray_rows(workload, points, base, tasks)
    else:
        raise ValueError(f"sweep(): backend must be 'local' or 'ray', not {backend!r}")

    asc, order, table, metric_keys, near_best = _native.sweep_rank(rows, rank_by, ascending)
    records = []
    for rank, i in enumerate(order, 1):
        row = rows[i]
        rec: Dict[str, Any] = {"rank": rank, "point": row["point"]}
        for name, (_, value) in _zip(names, row["knobs"]):
            rec[name] = _typed(value, originals.get(name, {}))
        metrics = row["metrics"] or {}
        for k in metric_keys:
            rec[k] = metrics.get(k, math.nan if row["metrics"] is None else None)
        rec["error"] = row["error"]
        rec["within_error_of_best"] = near_best[i]
        records.append(rec)
    try:
        import pandas as pd
    except ImportError:
        return records
    df = pd.DataFrame.from_records(
        records, columns=["rank", "point", *names, *metric_keys, "error", "within_error_of_best"]
    )
    df.attrs.update({"table": table, "rank_by": rank_by, "ascending": asc, "knobs": knobs})
    return df



def _ray_rows(workload: Workload, points: list, base: dict, tasks: Optional[int]) -> list:
    """Runs the points as Ray tasks over one object-store copy of the workload; rows in grid order."""
    import ray

    if not ray.is_initialized():
        ray.init()
    if not points:
        return []
    if tasks is None:
        tasks = 4 * max(1, int(ray.cluster_resources().get("CPU", 1)))
    tasks = max(1, min(tasks, len(points)))
    size = -(-len(points) // tasks)
    batches = [points[i : i + size] for i in range(0, len(points), size)]
    ref = ray.put(workload)
    remote = ray.remote(_ray_batch)
    results = ray.get([remote.remote(ref, b, base) for b in batches])
    return [row for batch in results for row in batch]


def _ray_batch(workload: Workload, points: list, base: dict) -> list:
    """One Ray task: simulates its points (in parallel on the worker) and returns their rows."""
    return list(_native.sweep_run(workload._native, points, base))
