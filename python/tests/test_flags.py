"""Flag parity with the command line: every flag `cachesim run --help` lists is a keyword of
`cachesim.run` (read off the built binary's help, not a hand list), with the same names, and
values are checked by the command line's own parser."""

import re

import pytest

import cachesim

NOT_FOUND = "unexpected keyword argument"


def help_flags(cli, *sub):
    p = cli(*sub, "--help")
    assert p.returncode == 0, p.stderr
    # Flag lines ("  -o, --out <FILE>" or "      --flag"), not flags quoted in descriptions.
    flags = set(re.findall(r"^(?:  -\w, |      )--([a-z0-9][a-z0-9-]*)", p.stdout, re.MULTILINE))
    for aliases in re.findall(r"\[aliases?: ([^\]]*)\]", p.stdout):
        flags |= set(re.findall(r"--([a-z0-9][a-z0-9-]*)", aliases))
    return sorted(flags - {"help", "version"})


def accepted(call, name, value):
    """True unless the call says the keyword is unknown (other errors are about the value)."""
    try:
        call(**{name: value})
    except TypeError as e:
        return NOT_FOUND not in str(e)
    except cachesim.Error:
        return True
    return True


def test_every_run_flag_is_a_keyword(cli, in_tmp):
    flags = help_flags(cli, "run")
    assert len(flags) > 40, flags
    # The package's own list is the same parser's: every long name the help shows but aliases.
    assert set(cachesim.run_flags()) <= set(flags)
    missing = []
    for flag in flags:
        name = flag.replace("-", "_")
        # An impossible value: the parser then refuses the value, not the name.
        if not accepted(lambda **kw: cachesim.run(keep_steps=False, **kw), name, "\x01bad"):
            missing.append(flag)
    assert missing == []


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="max_num_seq.*not a flag of `cachesim run`"):
        cachesim.run(max_num_seq=8)


def test_cache_and_analyze_flags_are_keywords(cli, in_tmp):
    for sub, call in [("cache", cachesim.cache), ("analyze", cachesim.analyze)]:
        for flag in help_flags(cli, sub):
            assert accepted(call, flag.replace("-", "_"), "\x01bad"), (sub, flag)


def test_switches_take_booleans():
    with pytest.raises(TypeError, match="switch"):
        cachesim.run(enable_chunked_prefill="yes")
    on = cachesim.run(engine="vllm-v0", enable_chunked_prefill=True, keep_steps=False)
    off = cachesim.run(engine="vllm-v0", enable_chunked_prefill=False, keep_steps=False)
    assert on.summary["config"]["engine"]["enable_chunked_prefill"] is True
    assert off.summary["config"]["engine"]["enable_chunked_prefill"] is False


def test_value_errors_carry_the_parsers_message(cli):
    p = cli("run", "--max-num-seqs", "many")
    assert p.returncode != 0
    first = p.stderr.splitlines()[0].removeprefix("error: ")
    with pytest.raises(cachesim.Error) as e:
        cachesim.run(max_num_seqs="many")
    assert str(e.value) == first
