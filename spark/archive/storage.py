"""The one filesystem layer: every byte of the archive goes through a ``Storage``.

Two implementations behind one interface, picked from the URL by ``open_storage``:
local paths (the embedded default) and S3 (any S3-compatible endpoint). Paths given to a
Storage are relative to its root and built only by ``spark.archive.layout``.

``create`` is the one write that must never overwrite: manifests are published with it,
so a manifest exists completely or not at all (local: write a temporary file and
``link`` it into place; S3: ``PutObject`` with ``If-None-Match: *``).
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

import pyarrow.fs as pafs

from cdc_codecs import TidelakeError
from spark.config import StorageConfig
from spark.runtime.services import S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT, boto_config, s3_retry_strategy


class StorageError(TidelakeError):
    """A storage operation failed; the message names the URL (never credentials)."""


class AlreadyExists(StorageError):
    """``create`` found the object already there."""


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the storage root
    size: int
    modified: dt.datetime | None  # UTC; None when the store does not say


class Storage:
    """Read, write and list objects under one root. Subclasses bind a backend."""

    url: str

    def read(self, path: str) -> bytes:
        with self.arrow_fs.open_input_stream(self.arrow_path(path)) as f:
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        """Write (or replace) an object. Segment names are deterministic, so a retry replaces."""
        with self.open_output(path) as f:
            f.write(data)

    def open_output(self, path: str) -> IO[bytes]:
        """A streaming writer (multipart on S3), for segments larger than memory should hold."""
        self._ensure_parent(path)
        return self.arrow_fs.open_output_stream(self.arrow_path(path))  # type: ignore[return-value]

    def exists(self, path: str) -> bool:
        return self.arrow_fs.get_file_info(self.arrow_path(path)).type == pafs.FileType.File

    def list(self, prefix: str) -> list[str]:
        """Paths of every object under ``prefix`` (recursive), relative to the root, sorted."""
        selector = pafs.FileSelector(self.arrow_path(prefix), recursive=True, allow_not_found=True)
        root = self.arrow_path("")
        out = []
        for info in self.arrow_fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                out.append(info.path[len(root):].lstrip("/"))
        return sorted(out)

    def list_files(self, prefix: str) -> list[StoredFile]:
        """Every object under ``prefix`` (recursive) with its size and modification time, sorted by path.

        Maintenance needs the times: nothing younger than its grace period is ever deleted.
        """
        selector = pafs.FileSelector(self.arrow_path(prefix), recursive=True, allow_not_found=True)
        root = self.arrow_path("")
        out = [StoredFile(info.path[len(root):].lstrip("/"), info.size or 0, info.mtime)
               for info in self.arrow_fs.get_file_info(selector) if info.type == pafs.FileType.File]
        return sorted(out, key=lambda f: f.path)

    def delete(self, path: str) -> None:
        try:
            self.arrow_fs.delete_file(self.arrow_path(path))
        except FileNotFoundError:
            pass

    def create(self, path: str, data: bytes) -> None:
        """Create an object that must not exist yet, atomically.

        Raises:
            AlreadyExists: another writer created it first.
        """
        raise NotImplementedError

    # -- backend plumbing

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        raise NotImplementedError

    def arrow_path(self, path: str) -> str:
        raise NotImplementedError

    def _ensure_parent(self, path: str) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class LocalStorage(Storage):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.url = self.root.as_uri()
        self._fs = pafs.LocalFileSystem()

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        return self._fs

    def arrow_path(self, path: str) -> str:
        return str(self.root / path) if path else str(self.root)

    def _ensure_parent(self, path: str) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)

    def write(self, path: str, data: bytes) -> None:
        """Replace atomically (a temporary file renamed into place), as an S3 PUT does: a record
        rewritten in place (a published W marked retired, a lease renewed) is never seen half-written."""
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "xb") as f:
                f.write(data)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    def create(self, path: str, data: bytes) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, target)  # atomic, and fails if the target exists
        except FileExistsError:
            raise AlreadyExists(f"{self.url}/{path} already exists") from None
        finally:
            tmp.unlink()


class S3Storage(Storage):
    """S3 or any S3-compatible store (SeaweedFS, MinIO). Streaming through Arrow's S3 client."""

    def __init__(self, config: StorageConfig) -> None:
        parsed = urlparse(config.url)
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.url = config.url.rstrip("/")
        self._config = config
        key = config.access_key_id or os.environ.get("AWS_ACCESS_KEY_ID")
        secret = config.secret_access_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
        endpoint = urlparse(config.endpoint_url) if config.endpoint_url else None
        self._fs = pafs.S3FileSystem(
            access_key=key,
            secret_key=secret,
            region=config.region or os.environ.get("AWS_REGION") or "us-east-1",
            endpoint_override=endpoint.netloc if endpoint else None,
            scheme=endpoint.scheme if endpoint else "https",
            allow_bucket_creation=False,
            # Bounded waits and retries (spark.runtime.services): a hung store fails a call, not the run forever.
            connect_timeout=S3_CONNECT_TIMEOUT,
            request_timeout=S3_REQUEST_TIMEOUT,
            retry_strategy=s3_retry_strategy(),
        )
        self._client = None
        self._credentials = (key, secret)

    def __getstate__(self) -> dict:
        # Picklable for Spark tasks: the Arrow filesystem and boto3 client are rebuilt there.
        return {"config": self._config}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["config"])  # type: ignore[misc]

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        return self._fs

    def arrow_path(self, path: str) -> str:
        key = "/".join(p for p in (self.prefix, path) if p)
        return f"{self.bucket}/{key}" if key else self.bucket

    def _key(self, path: str) -> str:
        return "/".join(p for p in (self.prefix, path) if p)

    def _boto(self):
        if self._client is None:
            import boto3

            key, secret = self._credentials
            self._client = boto3.client(
                "s3",
                endpoint_url=self._config.endpoint_url,
                region_name=self._config.region or os.environ.get("AWS_REGION") or "us-east-1",
                aws_access_key_id=key,
                aws_secret_access_key=secret,
                config=boto_config(),
            )
        return self._client

    def create(self, path: str, data: bytes) -> None:
        from botocore.exceptions import ClientError

        try:
            self._boto().put_object(Bucket=self.bucket, Key=self._key(path), Body=data, IfNoneMatch="*")
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412"):
                raise AlreadyExists(f"{self.url}/{path} already exists") from None
            raise StorageError(f"cannot create {self.url}/{path}: {code or exc}") from None


def open_storage(config: StorageConfig) -> Storage:
    url = config.url
    if url.startswith("s3://"):
        return S3Storage(config)
    if url.startswith("file://"):
        return LocalStorage(urlparse(url).path)
    if "://" in url:
        raise StorageError(f"unsupported storage URL {url!r}: use a local path, file:// or s3://")
    return LocalStorage(url)

