"""A loopback stand-in for the Hub's HTTP endpoints that huggingface_hub's real clients call to read a dataset repo.

The Hub double (hub_double.py) replaces the client; this replaces the network behind it, so a test runs the real
`HfApi` and `HfFileSystem` (their caches included) against a folder: each dataset repo is `root/<namespace>/<name>`,
as FolderHub keeps it, and a file written there is on the "Hub" at once. It answers a repo's info, its tree, the
paths-info of a few files and a file's bytes (by range), and notes each request's path; nothing else.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = "0" * 40
REPO_INFO = re.compile(r"/api/datasets/(?P<repo>[^/]+/[^/]+)(?:/revision/[^/]+)?")
TREE = re.compile(r"/api/datasets/(?P<repo>[^/]+/[^/]+)/tree/[^/]+/?(?P<path>.*)")
PATHS_INFO = re.compile(r"/api/datasets/(?P<repo>[^/]+/[^/]+)/paths-info/[^/]+")
RESOLVE = re.compile(r"/datasets/(?P<repo>[^/]+/[^/]+)/resolve/[^/]+/(?P<path>.+)")
RANGE = re.compile(r"bytes=(\d+)-(\d*)")


def entry(folder: Path, path: Path) -> dict:
    """A tree or paths-info entry, as the Hub gives one."""
    name = path.relative_to(folder).as_posix()
    if path.is_dir():
        return {"type": "directory", "path": name, "oid": COMMIT}
    data = path.read_bytes()
    return {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}


class HubHandler(BaseHTTPRequestHandler):
    root: Path
    requests: list[str]

    def do_HEAD(self) -> None:
        self.route(head=True)

    def do_GET(self) -> None:
        self.route(head=False)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self.requests.append(f"POST {urlsplit(self.path).path}")
        found = PATHS_INFO.fullmatch(unquote(urlsplit(self.path).path))
        if found is None:
            return self.answer(404, {"error": "not found"})
        folder = self.root / found["repo"]
        fields = parse_qs(body) if "=" in body and not body.startswith("{") else json.loads(body or "{}")
        paths = fields.get("paths", [])
        self.answer(200, [entry(folder, folder / name) for name in paths if (folder / name).exists()])

    def route(self, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.requests.append(f"{'HEAD' if head else 'GET'} {path}")
        if found := RESOLVE.fullmatch(path):
            return self.send_file(self.root / found["repo"] / found["path"], head)
        if found := TREE.fullmatch(path):
            folder = self.root / found["repo"]
            listed = folder / found["path"]
            if not listed.is_dir():
                return self.answer(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            recursive = parse_qs(urlsplit(self.path).query).get("recursive") == ["true"]
            children = sorted(listed.rglob("*") if recursive else listed.iterdir())
            return self.answer(200, [entry(folder, child) for child in children])
        if found := REPO_INFO.fullmatch(path):
            if not (self.root / found["repo"]).is_dir():
                return self.answer(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            return self.answer(200, {"id": found["repo"], "sha": COMMIT, "private": False})
        self.answer(404, {"error": "not found"})

    def send_file(self, path: Path, head: bool) -> None:
        if not path.is_file():
            return self.answer(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        data = path.read_bytes()
        start, end, status = 0, len(data) - 1, 200
        if ranged := RANGE.fullmatch(self.headers.get("Range") or ""):
            start, end, status = int(ranged[1]), min(int(ranged[2] or end), end), 206
        part = data[start : end + 1]
        self.send_response(status)
        self.send_header("Content-Length", str(len(part)))
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", COMMIT)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if not head:
            self.wfile.write(part)

    def answer(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving_hub(root: Path) -> Iterator[tuple[str, list[str]]]:
    """The stand-in on a free loopback port: its endpoint URL, and the list it notes each request's path in."""
    requests: list[str] = []
    handler = type("Handler", (HubHandler,), {"root": root, "requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
