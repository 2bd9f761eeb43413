"""Runs stored in object storage: ``playbook run --output s3://…``, ``playbook check s3://…`` and
``playbook compare 's3://…/*'`` against a real S3-compatible server on localhost (moto's standalone
server from PyPI, started here as its own process; nothing is mocked inside the test process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cmake_project

from playbook.localhost import free_port, wait_until_listening

BUCKET = "fleet-runs"


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory):
    """moto's S3 server on a free port, a bucket in it, and the environment boto3 and papermill read."""
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra: pip install -e '.[test]'")
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=out, stderr=subprocess.STDOUT)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        if not wait_until_listening(port, server, timeout_s=60):
            pytest.fail(f"moto's server did not start: {log.read_text()[-2000:]}")
        client = boto3.session.Session().client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                                                aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=BUCKET)
        yield env, client
    finally:
        server.terminate()
        server.wait(timeout=30)


def playbook(*args: str, env: dict[str, str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "playbook", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env}, cwd=cwd, check=False)


@pytest.mark.long
def test_a_run_goes_to_s3_and_is_read_back(tmp_path, s3_env):
    env, client = s3_env
    project = cmake_project(tmp_path)
    ran = playbook("run", "--set", "backend=cpu", "--set", "source.kind=path", "--set", f"source.path={project}",
                   "--set", "build.ccache=off", "--output", f"s3://{BUCKET}/runs", env=env, cwd=tmp_path)
    # the stand-in project builds a wheel without llama_cpp: verify fails, and the failed run is archived too
    assert "uploaded" in ran.stdout, ran.stdout + ran.stderr
    url = next(line.split(" to ")[-1] for line in ran.stdout.splitlines() if line.startswith("uploaded "))
    run_id = url.rsplit("/", 1)[-1]
    keys = {item["Key"] for item in client.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/")["Contents"]}
    names = {key.split("/", 2)[2] for key in keys}
    assert {"run.json", "manifest.json", "provenance.json", "params.json", "detect.json", "01-detect.ipynb",
            "02-configure.ipynb", "03-build-attempt-1.ipynb", "build-attempt-1.log"} <= names
    assert any(name.startswith("wheelhouse/attempt-1/tiny-0.1") for name in names)
    assert not (tmp_path / "outputs").exists()  # nothing left behind locally
    # the summary names the files where they are now, not in the deleted temporary folder (issue 25)
    summary = ran.stdout[ran.stdout.index("outcome: "):]
    assert "playbook-run-" not in summary and f"details: {url} " in summary, summary
    wheel_url = next(line.split()[1] for line in summary.splitlines() if line.startswith("wheel: "))
    assert wheel_url.startswith(f"{url}/wheelhouse/attempt-1/tiny-0.1") and f"aws s3 cp {wheel_url} ." in summary
    notebook = client.get_object(Bucket=BUCKET, Key=f"runs/{run_id}/01-detect.ipynb")["Body"].read()
    assert json.loads(notebook)["cells"]  # written through papermill's S3 handler, whole

    checked = playbook("check", url, env=env, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith(f"{url}: ok")

    log_key = f"runs/{run_id}/build-attempt-1.log"
    client.put_object(Bucket=BUCKET, Key=log_key, Body=b"rewritten\n")  # tampered with in storage
    tampered = playbook("check", url, env=env, cwd=tmp_path)
    assert tampered.returncode == 1 and "changed: build-attempt-1.log" in tampered.stdout

    compared = playbook("compare", f"s3://{BUCKET}/runs/*", "--output", str(tmp_path / "compare"), env=env,
                        cwd=tmp_path)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    table = (tmp_path / "compare" / "compare.csv").read_text()
    assert run_id in table and (tmp_path / "compare" / "runs" / run_id / "run.json").is_file()


def test_urls_that_are_not_s3_are_refused(tmp_path):
    from playbook.runfolder.remote import RemoteError, S3Location, check_remote

    with pytest.raises(RemoteError, match="gs:// is not supported"):
        check_remote("gs://bucket/runs")
    assert S3Location.parse("s3://b/runs/x/").child("a/b.json").url == "s3://b/runs/x/a/b.json"
    with pytest.raises(RemoteError, match="names no bucket"):
        S3Location.parse("s3:///runs")
