"""S3 for real: a local S3 server (moto's server mode, on a loopback port) holds a two-host run.

The command line reads it as a user's shell would, in its own process, with credentials and the
endpoint the AWS way (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL). The oracle is
the audit of the same two files on local disk. The server checks credentials (IAM), so a wrong
key is refused as a real bucket would refuse it; a missing bucket, a wrong key, a dead endpoint
and a missing backend are each one line on stderr and exit 3.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, SHARED, write_cpu_chip

boto3 = pytest.importorskip("boto3")
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

RUN = "2026_01_01_00_00_00"
PROFILE = FIXTURES / "sharded_train" / "plugins" / "profile" / RUN / "vm.xplane.pb"
HOSTS = ("host0", "host1")
BUCKET = "runs"
# The server lets this many requests through unsigned (IAM user, key, policy), then checks
# every request's signature against its IAM users.
UNSIGNED_SETUP_REQUESTS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The server, a user allowed s3:*, and the run uploaded; yields the environment a shell
    with that user's credentials has."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(UNSIGNED_SETUP_REQUESTS)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(port, 30)
        endpoint = f"http://127.0.0.1:{port}"
        unsigned = {"aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", **unsigned)
        iam.create_user(UserName="auditor")
        key = iam.create_access_key(UserName="auditor")["AccessKey"]
        allow = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        iam.put_user_policy(
            UserName="auditor",
            PolicyName="s3",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [allow]}),
        )
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "NO_COLOR": "1",
        }
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        s3.create_bucket(Bucket=BUCKET)
        for host in HOSTS:
            key_name = f"tb/plugins/profile/{RUN}/{host}.xplane.pb"
            s3.put_object(Bucket=BUCKET, Key=key_name, Body=PROFILE.read_bytes())
        yield env
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run on local disk: the oracle."""
    run = tmp_path_factory.mktemp("s3oracle") / "tb" / "plugins" / "profile" / RUN
    run.mkdir(parents=True)
    for host in HOSTS:
        (run / f"{host}.xplane.pb").write_bytes(PROFILE.read_bytes())
    return run.parents[2]


@pytest.fixture(scope="module")
def chip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cpu_chip(tmp_path_factory.mktemp("s3chip"))


def _hlogap(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hlogap", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _s3(env: dict[str, str]) -> Any:
    """A boto3 client of the server, as the shell's user."""
    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def _same_report(remote: dict[str, object], local: dict[str, object]) -> None:
    assert remote["source"]["hosts"] == list(HOSTS)  # type: ignore[index]
    assert remote["source"]["run"] == RUN  # type: ignore[index]
    for key in ("measured_us", "bound_us", "gap_us", "ops", "devices"):
        assert remote["summary"][key] == pytest.approx(local["summary"][key])  # type: ignore[index]
    names = [(o["module"], o["name"], o["measured_us"]) for o in remote["ops"]]  # type: ignore[attr-defined]
    assert names == [(o["module"], o["name"], o["measured_us"]) for o in local["ops"]]  # type: ignore[attr-defined]


def test_audit_cluster_and_check_read_a_run_in_s3(
    s3_env: dict[str, str], local_run: Path, chip: Path, tmp_path: Path
) -> None:
    local = _hlogap(["audit", str(local_run), "--chip", str(chip), "-f", "json"], s3_env)
    assert local.returncode == 0, local.stderr
    oracle = json.loads(local.stdout)
    url = f"s3://{BUCKET}/tb"

    remote = _hlogap(["audit", url, "--chip", str(chip), "-f", "json"], s3_env)
    assert remote.returncode == 0, remote.stderr
    _same_report(json.loads(remote.stdout), oracle)
    assert json.loads(remote.stdout)["source"]["files"] == [
        f"s3://{BUCKET}/tb/plugins/profile/{RUN}/{h}.xplane.pb" for h in HOSTS
    ]

    # Dask workers read the hosts from S3 themselves, with the same credentials chain.
    clustered = _hlogap(
        ["audit", url, "--chip", str(chip), "-f", "json", "--cluster", "local:2"], s3_env, 240
    )
    assert clustered.returncode == 0, clustered.stderr
    _same_report(json.loads(clustered.stdout), oracle)

    baseline = tmp_path / "baseline.json"
    baseline.write_text(local.stdout)
    gate = _hlogap(["check", url, "--baseline", str(baseline), "--chip", str(chip)], s3_env)
    assert gate.returncode == 0, gate.stdout + gate.stderr


def test_a_baseline_kept_in_s3_is_read_as_a_saved_report(
    s3_env: dict[str, str], local_run: Path, chip: Path
) -> None:
    """`check --baseline s3://.../base.json` and `diff s3://... PATH`: the object is the saved
    report, read through s3fs, never audited as a profile."""
    local = _hlogap(["audit", str(local_run), "--chip", str(chip), "-f", "json"], s3_env)
    assert local.returncode == 0, local.stderr
    s3 = _s3(s3_env)
    s3.put_object(Bucket=BUCKET, Key="baselines/main.json", Body=local.stdout.encode())
    url = f"s3://{BUCKET}/baselines/main.json"
    gate = _hlogap(["check", str(local_run), "--baseline", url, "--chip", str(chip)], s3_env)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert f"baseline: {url}; checked: {local_run}" in gate.stdout
    diff = _hlogap(["diff", url, str(local_run), "--chip", str(chip), "-f", "json"], s3_env)
    assert diff.returncode == 0, diff.stderr
    base = json.loads(diff.stdout)["base"]
    assert (base["path"], base["kind"]) == (url, "report")
    assert base["measured_us"] == pytest.approx(json.loads(local.stdout)["summary"]["measured_us"])


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hlogap: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_a_missing_bucket_is_one_line(s3_env: dict[str, str], chip: Path) -> None:
    line = _one_line_error(
        _hlogap(["audit", "s3://no-such-bucket/tb", "--chip", str(chip)], s3_env)
    )
    assert "not found: s3://no-such-bucket/tb" in line


def test_bad_credentials_are_one_line(s3_env: dict[str, str], chip: Path) -> None:
    env = {**s3_env, "AWS_ACCESS_KEY_ID": "AKIANOTAREALKEY00000", "AWS_SECRET_ACCESS_KEY": "x"}
    line = _one_line_error(_hlogap(["audit", f"s3://{BUCKET}/tb", "--chip", str(chip)], env))
    assert "access denied to s3://runs/tb" in line and "AWS_ACCESS_KEY_ID" in line


def test_a_dead_endpoint_is_one_line_within_a_timeout(s3_env: dict[str, str], chip: Path) -> None:
    env = {**s3_env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port()}"}
    start = time.monotonic()
    line = _one_line_error(_hlogap(["audit", f"s3://{BUCKET}/tb", "--chip", str(chip)], env))
    assert time.monotonic() - start < 60
    assert "cannot read s3://runs/tb" in line and "127.0.0.1" in line


@pytest.mark.parametrize(
    ("url", "hint"), [("s3://b/tb", "hlogap[s3]"), ("gs://b/tb", "hlogap[gcs]")]
)
def test_a_missing_backend_names_its_extra(url: str, hint: str) -> None:
    # The backend made unimportable, as in an install without the extra.
    code = (
        "import sys; sys.modules['s3fs'] = sys.modules['gcsfs'] = None; "
        "from hlogap.cli import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "audit", url], capture_output=True, text=True, timeout=60
    )
    line = _one_line_error(result)
    assert f"pip install '{hint}'" in line


def test_an_nsys_jax_archive_in_s3_audits_as_the_local_one(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    """An nsys-jax zip named by a URL is read through s3fs (its members fetched as they are
    read), as the local path is: it was called 'not an XSpace'."""
    archive = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"
    if not archive.is_file():
        pytest.skip(f"{archive} absent (../shared not beside the project)")
    s3 = _s3(s3_env)
    s3.put_object(Bucket=BUCKET, Key="nsys/rank0.zip", Body=archive.read_bytes())
    local = _hlogap(["audit", str(archive), "-f", "json"], s3_env)
    assert local.returncode == 0, local.stderr
    remote = _hlogap(["audit", f"s3://{BUCKET}/nsys/rank0.zip", "-f", "json"], s3_env)
    assert remote.returncode == 0, remote.stderr
    got, want = json.loads(remote.stdout), json.loads(local.stdout)
    for key in ("measured_us", "bound_us", "ops", "devices", "step_us"):
        assert got["summary"][key] == pytest.approx(want["summary"][key])
    ops = [(o["module"], o["name"], o["measured_us"]) for o in got["ops"]]
    assert ops == [(o["module"], o["name"], o["measured_us"]) for o in want["ops"]]
