"""An S3-compatible server (moto) on 127.0.0.1 for the tests that put artifacts, data or served models on an
object store, and the test's own view of a bucket through boto3.

The test process never loads tensorflow-io (only the processes it starts do: pipeline steps, pushers), so
what a test reads through `Bucket` is what any S3 client sees.
"""
from __future__ import annotations

import json
import logging


class S3Server:
    """A running moto server: `endpoint`, `env` (what TensorFlow's S3 filesystem and Beam's boto3 client read:
    the credentials come from the environment, as in a pod) and `beam_args` (no credential among them)."""

    def __init__(self):
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one INFO line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.endpoint = "http://%s:%d" % self._server.get_host_and_port()
        self.env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                    "AWS_DEFAULT_REGION": "us-east-1", "S3_ENDPOINT": self.endpoint, "S3_USE_HTTPS": "0",
                    "S3_VERIFY_SSL": "0", "AWS_EC2_METADATA_DISABLED": "true", "AWS_LOG_LEVEL": "3",
                    # A wrong endpoint fails in seconds instead of hanging for minutes.
                    "S3_CONNECT_TIMEOUT_MSEC": "5000", "S3_REQUEST_TIMEOUT_MSEC": "120000"}
        self.beam_args = [f"--s3_endpoint_url={self.endpoint}", "--s3_region_name=us-east-1"]

    def bucket(self, name: str, local) -> "Bucket":
        """Creates bucket `name`. Output: its view; `local` is a folder for downloads."""
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=name)
        return Bucket(client, name, self, local)

    def stop(self) -> None:
        self._server.stop()


class Bucket:
    """One bucket seen through boto3: read, list, download."""

    def __init__(self, client, name: str, server: S3Server, local):
        self.client, self.name, self.local = client, name, local
        self.env, self.beam_args = server.env, server.beam_args

    def uri(self, key: str) -> str:
        return f"s3://{self.name}/{key}"

    def _key(self, uri: str) -> str:
        assert uri.startswith(f"s3://{self.name}/"), uri
        return uri[len(f"s3://{self.name}/"):]

    def read(self, uri: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.name, Key=self._key(uri))["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None

    def write(self, uri: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=self._key(uri), Body=data)

    def json(self, uri: str) -> dict:
        data = self.read(uri)
        assert data is not None, f"{uri} does not exist"
        return json.loads(data)

    def keys(self, prefix_uri: str) -> list[str]:
        prefix = self._key(prefix_uri).rstrip("/") + "/"
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix)
        return sorted(item["Key"][len(prefix):] for page in pages for item in page.get("Contents", []))

    def tree(self, prefix_uri: str) -> dict[str, bytes]:
        """Relative key -> bytes of every object under `prefix_uri`."""
        return {key: self.read(f"{prefix_uri.rstrip('/')}/{key}") for key in self.keys(prefix_uri)}

    def download(self, prefix_uri: str) -> str:
        """Copies every object under `prefix_uri` into a new local folder. Output: that folder."""
        target = self.local / self._key(prefix_uri).replace("/", "_")
        for relative in self.keys(prefix_uri):
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.read(f"{prefix_uri.rstrip('/')}/{relative}"))
        return str(target)
