"""Type stubs of the cachesim package (see the module's docstrings)."""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, overload

PathLike = Union[str, os.PathLike[str]]

__version__: str
SAMPLE_TRACE_NAME: str

class Error(ValueError):
    """What the cachesim command line would refuse, with its message."""
    result: "Result"

class TraceError(Error):
    """A trace that cannot be read."""
    path: str
    line: Optional[int]
    field: Optional[str]

class StartupRefused(Error):
    """A configuration the engine itself would refuse at start-up."""

class Workload:
    """A trace read and tokenised once, shared by every run handed it."""
    @classmethod
    def from_file(cls, path: Optional[PathLike] = None, **flags: Any) -> "Workload": ...
    @property
    def path(self) -> str: ...
    @property
    def info(self) -> Dict[str, Any]: ...
    @property
    def requests(self) -> Any: ...
    def __len__(self) -> int: ...

class Result:
    """One simulation."""
    @property
    def summary(self) -> Dict[str, Any]: ...
    @property
    def requests(self) -> Any: ...
    @property
    def steps(self) -> Any: ...
    @property
    def token_times(self) -> Any: ...
    @property
    def notes(self) -> List[str]: ...
    @property
    def failures(self) -> Dict[str, Tuple[int, str]]: ...
    def __getitem__(self, key: str) -> Any: ...

@overload
def run(
    trace: Optional[PathLike] = None,
    engine: Optional[str] = None,
    *,
    seeds: int,
    keep_steps: bool = True,
    **flags: Any,
) -> Dict[str, Any]: ...
@overload
def run(
    trace: Optional[PathLike] = None,
    engine: Optional[str] = None,
    *,
    workload: Optional[Workload] = None,
    keep_steps: bool = True,
    **flags: Any,
) -> Result: ...
def cache(trace: Optional[PathLike] = None, *, workload: Optional[Workload] = None, **flags: Any) -> Dict[str, Any]: ...
def analyze(trace: Optional[PathLike] = None, **flags: Any) -> Dict[str, Any]: ...
def command(name: str, **flags: Any) -> str: ...
def plan(trace: Optional[PathLike] = None, **flags: Any) -> Dict[str, Any]: ...
def calibrate(**flags: Any) -> Any: ...
def validate(**flags: Any) -> Dict[str, Any]: ...
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
) -> Any: ...
def run_flags() -> List[str]: ...
def trace_flags() -> List[str]: ...
