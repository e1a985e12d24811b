"""Bad input raises Python exceptions carrying the command line's message: the file, line and
field of a bad record (also as attributes), refused values, refused configurations."""

import pytest

import cachesim


def cli_error(cli, *args):
    p = cli(*args)
    assert p.returncode != 0
    return p.stderr.strip().removeprefix("error: ")


def test_bad_record_names_file_line_and_field(cli, tmp_path):
    t = tmp_path / "bad.jsonl"
    t.write_text('{"prompt_ids": [1, 2, 3], "output_len": 4}\n{"prompt_ids": [1, 2], "output_len": 4}\n'
                 '{"prompt_ids": [1, "x"], "output_len": 4}\n')
    with pytest.raises(cachesim.TraceError) as e:
        cachesim.run(t)
    assert str(e.value) == cli_error(cli, "run", "--trace", t)
    assert e.value.path == str(t)
    assert e.value.line == 3
    assert e.value.field is not None and "prompt_ids" in e.value.field
    with pytest.raises(cachesim.TraceError) as e2:
        cachesim.Workload.from_file(t)
    assert str(e2.value) == str(e.value)
    assert isinstance(e.value, ValueError)  # cachesim.Error is a ValueError


def test_missing_file(cli, tmp_path):
    t = tmp_path / "nope.jsonl"
    with pytest.raises(cachesim.TraceError) as e:
        cachesim.run(t)
    assert str(e.value) == cli_error(cli, "run", "--trace", t)
    assert e.value.line is None


def test_refused_configuration(cli):
    with pytest.raises(cachesim.Error) as e:
        cachesim.run(tp=0)
    assert str(e.value) == cli_error(cli, "run", "--tp", "0")
    with pytest.raises(cachesim.Error) as e:
        cachesim.run(model="no-such-model")
    assert str(e.value) == cli_error(cli, "run", "--model", "no-such-model")


def test_refused_start_up(cli):
    # KV memory for less than one block: vLLM refuses to start.
    args = {"kv_cache_memory_bytes": 1000}
    with pytest.raises(cachesim.Error) as e:
        cachesim.run(**args)
    assert str(e.value) == cli_error(cli, "run", "--kv-cache-memory-bytes", "1000")


def test_bad_sweep_input():
    with pytest.raises(cachesim.Error, match="not a flag"):
        cachesim.sweep({"max_num_seq": [1, 2]})
    with pytest.raises(cachesim.Error, match="changes how the trace is read"):
        cachesim.sweep({"tokenizer": ["cl100k", "o200k"]})
    with pytest.raises(cachesim.Error, match="unknown metric"):
        cachesim.sweep({"max_num_seqs": [8]}, rank_by="speed")
