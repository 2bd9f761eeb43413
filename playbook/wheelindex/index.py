"""A PEP 503 index of verified wheels in a folder, behind an HTTP server, or under ``s3://bucket/prefix``.

Wheels of one llama-cpp-python version built for different machines share one file name, so each wheel is an
index of its own, a *variant* named by its backend and digest (as upstream keeps ``whl/cpu``, ``whl/cu124``)::

    playbook-index.json                                   every variant's record: what install chooses from
    vocab/ggml-vocab-llama-spm.gguf                       the tokenizer the check's synthetic model needs
    <variant>/simple/index.html                           PEP 503 root: one project
    <variant>/simple/llama-cpp-python/index.html          <a href="WHEEL#sha256=...">
    <variant>/simple/llama-cpp-python/WHEEL               the wheel
    <variant>/simple/llama-cpp-python/WHEEL.playbook.json its record, beside it

pip and uv read ``<variant>/simple`` as an index URL. HTTP publishing PUTs each file (a WebDAV or generic
artifact server); reading is plain GET. A variant is never overwritten: publishing the same wheel again is a no-op.
"""

from __future__ import annotations

import html
import http.client
import json
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from playbook.errors import PlaybookError
from playbook.files import atomic_write_bytes, sha256_of, temporary_name
from playbook.serialization import from_dict, to_json_text
from playbook.wheelindex.metadata import PROJECT, WheelRecord

CATALOGUE = "playbook-index.json"
VOCABULARY = "vocab/ggml-vocab-llama-spm.gguf"
RECORD_SUFFIX = ".playbook.json"
TIMEOUT_S = 30.0
ANCHOR = re.compile(r'<a\s+href="(?P<href>[^"#]+)(?:#sha256=(?P<sha256>[0-9a-f]{64}))?"', re.IGNORECASE)


class IndexError_(PlaybookError):
    """An index could not be read or written."""


class Unreachable(IndexError_):
    """The index did not answer (no server, no route, no bucket)."""


class Store(Protocol):
    location: str

    def read(self, path: str) -> bytes | None: ...
    def download(self, path: str, target: Path) -> None: ...
    def write(self, path: str, data: bytes) -> None: ...
    def upload(self, path: str, source: Path) -> None: ...
    def url(self, path: str) -> str: ...


class FolderStore:
    def __init__(self, root: Path):
        self.root = Path(root).expanduser().absolute()
        self.location = str(self.root)

    def read(self, path: str) -> bytes | None:
        if not self.root.is_dir():
            raise Unreachable(f"{self.root} is not a folder")
        file = self.root / path
        return file.read_bytes() if file.is_file() else None

    def download(self, path: str, target: Path) -> None:
        shutil.copyfile(self.root / path, target)

    def write(self, path: str, data: bytes) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.root / path, data)

    def upload(self, path: str, source: Path) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = temporary_name(target)
        shutil.copyfile(source, partial)
        os.replace(partial, target)

    def url(self, path: str) -> str:
        return (self.root / path).as_uri()


class HttpStore:
    def __init__(self, url: str):
        self.base = url.rstrip("/") + "/"
        self.location = url

    def _open(self, request: urllib.request.Request | str):  # type: ignore[no-untyped-def]
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError) as error:
            raise Unreachable(f"{self.location} did not answer: {getattr(error, 'reason', error)}") from None

    def read(self, path: str) -> bytes | None:
        try:
            with self._open(self.url(path)) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise IndexError_(f"GET {self.url(path)}: HTTP {error.code} {error.reason}") from None
        except (http.client.HTTPException, OSError) as error:
            raise Unreachable(f"GET {self.url(path)} was cut off: {type(error).__name__} {error}") from None

    def download(self, path: str, target: Path) -> None:
        try:
            with self._open(self.url(path)) as response, target.open("wb") as out:
                shutil.copyfileobj(response, out, 1 << 20)
        except urllib.error.HTTPError as error:
            raise IndexError_(f"GET {self.url(path)}: HTTP {error.code} {error.reason}") from None
        except (http.client.HTTPException, OSError) as error:
            raise Unreachable(f"GET {self.url(path)} was cut off: {type(error).__name__} {error}") from None

    def write(self, path: str, data: bytes) -> None:
        request = urllib.request.Request(self.url(path), data=data, method="PUT")
        try:
            with self._open(request):
                pass
        except urllib.error.HTTPError as error:
            raise IndexError_(f"PUT {self.url(path)}: HTTP {error.code} {error.reason}; the server must accept "
                              "uploads by PUT (WebDAV, a generic artifact repository)") from None

    def upload(self, path: str, source: Path) -> None:
        self.write(path, source.read_bytes())

    def url(self, path: str) -> str:
        return urllib.parse.urljoin(self.base, urllib.parse.quote(path))


class S3Store:
    def __init__(self, url: str, client: Any = None):
        from playbook.runfolder.remote import S3Location, s3_client

        self.prefix = S3Location.parse(url)
        self.client: Any = client or s3_client()
        self.location = url

    def _call(self, what: str, call):  # type: ignore[no-untyped-def]
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

        try:
            return call()
        except EndpointConnectionError as error:
            raise Unreachable(f"{self.location} did not answer: {error}") from None
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
                return None
            raise IndexError_(f"{what} {self.location}: {error}") from None
        except BotoCoreError as error:
            raise IndexError_(f"{what} {self.location}: {error}") from None

    def read(self, path: str) -> bytes | None:
        place = self.prefix.child(path)
        found = self._call("reading", lambda: self.client.get_object(Bucket=place.bucket, Key=place.key))
        return None if found is None else bytes(found["Body"].read())

    def download(self, path: str, target: Path) -> None:
        place = self.prefix.child(path)
        self._call("downloading", lambda: self.client.download_file(place.bucket, place.key, str(target)))

    def write(self, path: str, data: bytes) -> None:
        place = self.prefix.child(path)
        self._call("writing", lambda: self.client.put_object(Bucket=place.bucket, Key=place.key, Body=data))

    def upload(self, path: str, source: Path) -> None:
        place = self.prefix.child(path)
        self._call("uploading", lambda: self.client.upload_file(str(source), place.bucket, place.key))

    def url(self, path: str) -> str:
        """The object's HTTP address (the endpoint's path style): what pip and uv can read."""
        place = self.prefix.child(path)
        endpoint = os.environ.get("AWS_ENDPOINT_URL", "").rstrip("/") or f"https://{place.bucket}.s3.amazonaws.com"
        return (f"{endpoint}/{place.key}" if endpoint.endswith("amazonaws.com")
                else f"{endpoint}/{place.bucket}/{place.key}")


def open_store(location: str | Path) -> Store:
    """A folder, ``http(s)://``, or ``s3://``; anything else is refused naming what is accepted."""
    text = str(location)
    if text.startswith("s3://"):
        return S3Store(text)
    if text.startswith(("http://", "https://")):
        return HttpStore(text)
    if text.startswith("file://"):
        return FolderStore(Path(urllib.parse.unquote(urllib.parse.urlparse(text).path)))
    if "://" in text:
        raise IndexError_(f"{text}: an index is a folder, http(s)://host/path or s3://bucket/prefix; "
                          f"{text.split('://')[0]}:// is not supported")
    return FolderStore(Path(text))


def wheel_path(record: WheelRecord) -> str:
    return f"{record.variant}/simple/{PROJECT}/{record.wheel}"


def variant_index(record: WheelRecord) -> str:
    """The variant's PEP 503 index, relative to the index root (what pip's --index-url names)."""
    return f"{record.variant}/simple"


@dataclass
class Catalogue:
    records: list[WheelRecord] = field(default_factory=list)
    vocabulary_sha256: str = ""  # of vocab/...gguf; "" when the index carries none


def read_catalogue(store: Store) -> Catalogue:
    """Every record the index lists; an index without a catalogue is empty. Raises :class:`Unreachable`."""
    data = store.read(CATALOGUE)
    if data is None:
        return Catalogue()
    try:
        parsed = json.loads(data)
        return Catalogue([from_dict(WheelRecord, item) for item in parsed.get("records", [])],
                         str(parsed.get("vocabulary_sha256", "")))
    except (ValueError, TypeError, KeyError) as error:
        raise IndexError_(f"{store.location}/{CATALOGUE} is not a playbook index catalogue ({error}); "
                          "publish into an empty folder or prefix") from None


def project_page(record: WheelRecord) -> str:
    name = html.escape(record.wheel)
    return ("<!DOCTYPE html>\n<html><body>\n"
            f'<a href="{name}#sha256={record.sha256}">{name}</a>\n</body></html>\n')


def root_page() -> str:
    return f'<!DOCTYPE html>\n<html><body>\n<a href="{PROJECT}/">{PROJECT}</a>\n</body></html>\n'


def publish(store: Store, record: WheelRecord, wheel: Path, vocabulary: Path | None = None) -> str:
    """Put the wheel, its record and its pages into the index, then list it in the catalogue (last, so a reader
    never sees a record whose wheel is not there yet). Returns the variant's index URL."""
    if isinstance(store, FolderStore):
        store.root.mkdir(parents=True, exist_ok=True)
    catalogue = read_catalogue(store)
    if any(r.sha256 == record.sha256 for r in catalogue.records):
        return store.url(variant_index(record))
    store.upload(wheel_path(record), wheel)
    store.write(wheel_path(record) + RECORD_SUFFIX, to_json_text(record).encode())
    store.write(f"{record.variant}/simple/{PROJECT}/index.html", project_page(record).encode())
    store.write(f"{record.variant}/simple/index.html", root_page().encode())
    if vocabulary is not None and not catalogue.vocabulary_sha256:
        store.upload(VOCABULARY, vocabulary)
        catalogue.vocabulary_sha256 = sha256_of(vocabulary)
    catalogue.records.append(record)
    store.write(CATALOGUE, to_json_text(catalogue).encode())
    return store.url(variant_index(record))


def listed_sha256(store: Store, record: WheelRecord) -> str:
    """The sha256 the variant's PEP 503 page gives the wheel (what pip and uv check); "" when it names none."""
    page = store.read(f"{record.variant}/simple/{PROJECT}/index.html")
    for match in ANCHOR.finditer(page.decode(errors="replace") if page else ""):
        if urllib.parse.unquote(match["href"]) == record.wheel:
            return match["sha256"] or ""
    return ""


class DigestMismatch(IndexError_):
    """A downloaded file's sha256 is not the one its index entry gives."""


def fetch_wheel(store: Store, record: WheelRecord, folder: Path) -> Path:
    """The wheel downloaded to a temporary name in ``folder``, its sha256 checked against the index page and the
    record, then renamed to its own name: an interrupted or wrong download leaves no file of that name."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / record.wheel
    if target.is_file() and sha256_of(target) == record.sha256:
        return target
    expected = listed_sha256(store, record) or record.sha256

    def refusal(got: str) -> str:
        if got == expected and got == record.sha256:
            return ""
        return (f"{store.url(wheel_path(record))}: sha256 {got}, its index entry says {expected}"
                + (f" and its record {record.sha256}" if expected != record.sha256 else ""))

    download_whole(store, wheel_path(record), target, refusal)
    return target


def download_whole(store: Store, path: str, target: Path, refusal: Callable[[str], str]) -> str:
    """``path`` of ``store`` downloaded to a temporary name beside ``target``, its sha256 given to ``refusal`` (the
    reason to refuse it, "" to keep it), then renamed to ``target``: an interrupted or refused download leaves no
    file of that name (:class:`DigestMismatch` when refused). Returns its sha256."""
    partial = temporary_name(target)
    try:
        store.download(path, partial)
        got = sha256_of(partial)
        if reason := refusal(got):
            raise DigestMismatch(reason)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return got


def fetch_vocabulary(store: Store, folder: Path) -> Path | None:
    """The index's tokenizer vocabulary as ``folder/models/<name>`` (the layout verify's model unit reads)."""
    target = folder / "models" / Path(VOCABULARY).name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = temporary_name(target)
    try:
        expected = read_catalogue(store).vocabulary_sha256
        if not expected:
            return None
        store.download(VOCABULARY, partial)
        if (got := sha256_of(partial)) != expected:
            raise DigestMismatch(f"{store.url(VOCABULARY)}: sha256 {got}, the catalogue says {expected}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target
