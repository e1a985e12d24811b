"""Shared fixtures: the repository's release binary (for comparisons with the command line), a
scratch directory as the working directory.

The binary is ``$CACHESIM_BIN`` or ``target/release/cachesim`` at the repository root (``cargo
build --release``); tests comparing with it skip when it is absent, unless
``CACHESIM_REQUIRE_DATA=1`` (as in CI), where that is a failure.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _binary():
    b = os.environ.get("CACHESIM_BIN") or str(REPO / "target" / "release" / "cachesim")
    return b if os.path.exists(b) else None


@pytest.fixture(scope="session")
def cli():
    """Runs the cachesim binary: cli(*args) -> CompletedProcess (text, not checked)."""
    b = _binary()
    if b is None:
        msg = "no cachesim binary (build it with `cargo build --release` or set CACHESIM_BIN)"
        if os.environ.get("CACHESIM_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)

    def call(*args, cwd=None):
        return subprocess.run([b, *map(str, args)], capture_output=True, text=True, cwd=cwd)

    return call


@pytest.fixture(scope="session")
def cli_json(cli):
    """cli_json(*args) -> the parsed stdout of a command that must succeed."""

    def call(*args, cwd=None):
        p = cli(*args, cwd=cwd)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    return call


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_random_trace(path, n, prompt=200, output=50, seed=1):
    """A native JSONL trace of ``n`` requests with random token ids (no binary needed)."""
    import random

    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            ids = [rng.randrange(100_000) for _ in range(rng.randint(prompt // 2, prompt))]
            f.write(json.dumps({"prompt_ids": ids, "output_len": rng.randint(output // 2, output)}) + "\n")
    return path
