"""The binding gives the command line's answers because it runs the command line's own code:
``run(deployment=…)`` expands the file as ``cachesim run --deployment`` does, a disaggregated
run's ``requests_csv`` has the CLI's prefill/decode rows, and ``plan``, ``calibrate`` and
``validate`` return the binary's ``--json`` documents."""

import csv

import cachesim
import pytest

from conftest import REPO, write_random_trace

DEPLOYMENTS = REPO / "calibration" / "deployments"


@pytest.mark.parametrize("file", ["v100-llama11b-2dp-router.toml", "v100-llama11b-1p1d.toml"])
def test_deployment_files_expand_as_on_the_command_line(cli_json, tmp_path, file):
    t = write_random_trace(tmp_path / "r.jsonl", 60)
    d = DEPLOYMENTS / file
    expected = cli_json("run", "--deployment", d, "--trace", t, "--request-rate", "inf", "--json")
    got = cachesim.run(deployment=d, trace=t, request_rate="inf").summary
    assert got == expected
    assert got["config"]["deployment_file"]["path"] == str(d)


def test_a_flag_overrides_the_deployment_file(cli_json, tmp_path):
    t = write_random_trace(tmp_path / "r.jsonl", 40)
    d = DEPLOYMENTS / "v100-llama11b-2dp-router.toml"
    args = ["--deployment", d, "--trace", t, "--request-rate", "inf", "--router", "round-robin"]
    expected = cli_json("run", *args, "--json")
    got = cachesim.run(deployment=d, trace=t, request_rate="inf", router="round-robin").summary
    assert got == expected
    overridden = got["config"]["deployment_file"]["overridden"]
    assert overridden == expected["config"]["deployment_file"]["overridden"] and overridden


def test_pd_requests_csv_has_the_cli_rows(cli, in_tmp):
    t = write_random_trace(in_tmp / "r.jsonl", 30)
    flags = ["--trace", t, "--prefill-instances", "1", "--decode-instances", "1", "--request-rate", "10"]
    p = cli("run", *flags, "--requests-csv", in_tmp / "cli.csv")
    assert p.returncode == 0, p.stderr
    cachesim.run(trace=t, prefill_instances=1, decode_instances=1, request_rate=10, requests_csv=in_tmp / "py.csv")
    cli_rows = list(csv.reader(open(in_tmp / "cli.csv")))
    py_rows = list(csv.reader(open(in_tmp / "py.csv")))
    assert py_rows == cli_rows
    assert any("prefill" in h for h in cli_rows[0]), cli_rows[0]


def test_plan_is_the_cli_json(cli_json, tmp_path):
    t = write_random_trace(tmp_path / "r.jsonl", 60)
    args = ["--trace", t, "--slo", "ttft_p99=2000,tpot_p99=50", "--grid", "max-num-seqs=8,32"]
    expected = cli_json("plan", *args, "--json")
    got = cachesim.plan(trace=t, slo="ttft_p99=2000,tpot_p99=50", grid=["max-num-seqs=8,32"])
    assert got == expected


def test_plan_of_deployments_is_the_cli_json(cli_json, tmp_path):
    t = write_random_trace(tmp_path / "r.jsonl", 40)
    args = ["--trace", t, "--slo", "ttft_p99=1000,tpot_p99=30", "--target-rate", "2"]
    args += ["--gpus", "h100-sxm,a100-80gb", "--tp", "1,2", "--instances", "1..4"]
    args += ["--gpu-price", "h100-sxm=3.5,a100-80gb=1.8"]
    expected = cli_json("plan", *args, "--json")
    got = cachesim.plan(
        trace=t,
        slo="ttft_p99=1000,tpot_p99=30",
        target_rate=2,
        gpus="h100-sxm,a100-80gb",
        tp="1,2",
        instances="1..4",
        gpu_price="h100-sxm=3.5,a100-80gb=1.8",
    )
    assert got == expected


def test_calibrate_reads_a_report_as_the_cli(cli_json):
    report = REPO / "calibration" / "reports" / "vllm-ttft-64seq-6144btk.txt"
    assert cachesim.calibrate(report=report) == cli_json("calibrate", "--report", report, "--json")


def test_validate_is_the_cli_json(cli_json):
    cases = REPO / "calibration" / "cases"
    expected = cli_json("validate", "--cases-dir", cases, "--cases", "vllm-ttft*", "--json")
    got = cachesim.validate(cases_dir=cases, cases="vllm-ttft*")
    assert got == expected
    assert got["rows"], "the seed case runs without the data folder"


def test_command_errors_carry_the_cli_message(cli):
    p = cli("plan", "--slo", "nonsense")
    assert p.returncode != 0
    with pytest.raises(cachesim.Error) as e:
        cachesim.plan(slo="nonsense")
    assert str(e.value).splitlines()[0].split(": ", 1)[-1] in p.stderr


def test_seeds_return_the_cli_document(cli_json, tmp_path):
    t = write_random_trace(tmp_path / "r.jsonl", 30)
    args = ["--trace", t, "--request-rate", "10", "--seed", "3", "--seeds", "3", "--json"]
    expected = cli_json("run", *args)
    got = cachesim.run(trace=t, request_rate=10, seed=3, seeds=3)
    assert got == expected
    assert got["seeds"]["seeds"] == [3, 4, 5]
    m = got["metrics"]["mean_ttft_ms"]
    assert m["median"] == sorted(m["per_seed"])[1]
    # seeds=1 is the plain run; a preloaded workload cannot be handed to the command line.
    assert isinstance(cachesim.run(trace=t, request_rate=10, seeds=1), cachesim.Result)
    with pytest.raises(TypeError, match="seeds=N"):
        cachesim.run(workload=cachesim.Workload.from_file(t), request_rate=10, seeds=2)
    with pytest.raises(cachesim.Error, match="changes nothing"):
        cachesim.run(trace=t, seeds=2, request_rate="inf")
