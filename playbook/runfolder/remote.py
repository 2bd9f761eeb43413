"""Run folders in object storage: ``s3://bucket/prefix``, where a fleet keeps its runs.

A run executes in a local folder as always; :func:`upload_run` then copies the whole folder to
``s3://bucket/prefix/<run id>/``: the executed notebooks through papermill's own I/O handlers
(``papermill.iorw``, whose S3 handler uses boto3), every other file with boto3 itself, byte for
byte, so ``playbook check`` re-hashes the copy against its manifest. Reading back
(:func:`download_run`) takes exact bytes with boto3: papermill's S3 reader joins lines and drops a
file's last newline, which would change the notebooks' sha256.

The endpoint, region and credentials are boto3's usual ones (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``~/.aws/config``...); papermill's reader of ``BOTO3_ENDPOINT_URL`` is
given the same endpoint when only ``AWS_ENDPOINT_URL`` is set.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from playbook.errors import PlaybookError
from playbook.runfolder.layout import LOCK, RUN

SCHEME = "s3://"


class RemoteError(PlaybookError):
    """Object storage could not be read or written."""


def is_remote(location: str | Path) -> bool:
    return str(location).startswith(SCHEME)


def check_remote(location: str) -> None:
    """A location other than a folder or ``s3://`` is refused, naming what is accepted."""
    if "://" in location and not is_remote(location):
        raise RemoteError(f"{location}: runs are stored in a folder or under s3://bucket/prefix; "
                          f"{location.split('://')[0]}:// is not supported")


@dataclass(frozen=True)
class S3Location:
    bucket: str
    key: str  # no leading or trailing '/'

    @classmethod
    def parse(cls, url: str) -> S3Location:
        if not is_remote(url):
            raise RemoteError(f"{url} is not an s3:// URL")
        bucket, _, key = url[len(SCHEME):].partition("/")
        if not bucket:
            raise RemoteError(f"{url} names no bucket: give s3://bucket/prefix")
        return cls(bucket, key.strip("/"))

    def child(self, name: str) -> S3Location:
        return S3Location(self.bucket, "/".join(filter(None, [self.key, name.strip("/")])))

    @property
    def url(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"


def s3_client() -> Any:
    try:
        import boto3
    except ImportError:
        raise RemoteError("s3:// locations need boto3: pip install 'llama-cpp-playbook[s3]'") from None
    return boto3.session.Session().client("s3")


def _papermill_endpoint() -> None:
    """papermill's S3 resource reads BOTO3_ENDPOINT_URL, boto3 reads AWS_ENDPOINT_URL: one endpoint for both."""
    if os.environ.get("AWS_ENDPOINT_URL") and not os.environ.get("BOTO3_ENDPOINT_URL"):
        os.environ["BOTO3_ENDPOINT_URL"] = os.environ["AWS_ENDPOINT_URL"]


def upload_run(run_dir: Path, destination: str, client: Any = None) -> str:
    """Copy the run folder to ``destination/<run folder name>/``; returns that URL."""
    from botocore.exceptions import BotoCoreError, ClientError
    from papermill.iorw import papermill_io

    _papermill_endpoint()
    client = client or s3_client()
    target = S3Location.parse(destination).child(run_dir.name)
    try:
        for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
            relative = path.relative_to(run_dir).as_posix()
            if relative == LOCK:
                continue
            place = target.child(relative)
            if path.suffix == ".ipynb":
                papermill_io.write(path.read_bytes().decode("utf-8"), place.url)
            else:
                client.upload_file(str(path), place.bucket, place.key)
    except (BotoCoreError, ClientError) as error:
        raise RemoteError(f"uploading {run_dir} to {target.url} failed: {error}") from None
    return target.url


def _keys(client: Any, location: S3Location, prefix: str) -> list[str]:
    from botocore.exceptions import BotoCoreError, ClientError

    keys: list[str] = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=prefix):
            keys += [item["Key"] for item in page.get("Contents", [])]
    except (BotoCoreError, ClientError) as error:
        raise RemoteError(f"listing s3://{location.bucket}/{prefix} failed: {error}") from None
    return keys


def list_runs(pattern: str, client: Any = None) -> list[str]:
    """Run folder URLs that ``pattern`` names (``s3://bucket/prefix/*``: every run under the prefix);
    a run folder is a prefix holding ``run.json``."""
    client = client or s3_client()
    location = S3Location.parse(pattern)
    magic = glob.has_magic(location.key)
    fixed = location.key.split("*")[0].split("?")[0].split("[")[0] if magic else location.key + "/"
    wanted = f"{location.key}/{RUN}"
    found = [key[: -len(RUN) - 1] for key in _keys(client, location, fixed)
             if fnmatch.fnmatchcase(key, wanted) and (magic or key == wanted)]
    return [S3Location(location.bucket, key).url for key in sorted(found)]


def download_run(url: str, destination: Path, client: Any = None) -> Path:
    """The run folder at ``url`` copied, byte for byte, into ``destination`` (created)."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = client or s3_client()
    location = S3Location.parse(url)
    keys = _keys(client, location, location.key + "/")
    if f"{location.key}/{RUN}" not in keys:
        raise RemoteError(f"{url} is not a run folder (no {RUN})")
    destination = destination.resolve()
    for key in keys:
        relative = PurePosixPath(key[len(location.key) + 1:])
        target = (destination / relative).resolve()
        if ".." in relative.parts or not target.is_relative_to(destination):
            raise RemoteError(f"{url}: object {key} would land outside {destination}")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            client.download_file(location.bucket, key, str(target))
        except (BotoCoreError, ClientError) as error:
            raise RemoteError(f"downloading s3://{location.bucket}/{key} failed: {error}") from None
    return destination
