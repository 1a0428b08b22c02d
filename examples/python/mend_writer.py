#!/usr/bin/env python3
"""A writer in another process committing splits to mend over HTTP (`mend serve`).

Standard library only: paste it, or import it. The protocol, one request per step:

    begin      POST /v1/datasets/{d}/operations                       intent written, rows staged
    upload     PUT  /v1/datasets/{d}/operations/{op}/splits/{split}   the payload, streamed
    heartbeat  POST /v1/datasets/{d}/operations/{op}/heartbeat        the lease, extended
    publish    POST /v1/datasets/{d}/operations/{op}/publish          checked, confirmed, published
    abort      POST /v1/datasets/{d}/operations/{op}/abort            rolled back at once
    show       GET  /v1/datasets/{d}/operations/{op}                  where it stands

The operation id is every step's idempotency key, so `commit` retries safely:

- A connection error or a 503 (server restarting, dataset recovering, overloaded) says the
  outcome is unknown: the same step is sent again with the same operation id, which answers
  the truth (a begin resumes, an upload already in place writes nothing, a publish that
  landed is found published).
- A 412 saying the operation "has ended" (abandoned by recovery after its lease ran out, or
  aborted) means nothing of it is visible: `commit` re-reads the dataset's checkpoint and,
  if the delta still starts where it was, starts over with a new operation id. Its split ids
  then get the suffix `.rN`: the ended operation's rows may still hold the old ids (marked
  for deletion), and mend never lets a new operation take a row another one staged.
- A 412 saying it is "already published" (a step sent after the publish landed, by this
  writer or by recovery finishing the operation) is looked up with `show`: its result.
- Anything else (400, 404, another 412 such as a checkpoint that moved) is raised.

Exactly-once ingestion: a checkpoint delta's `from_position` must equal the dataset's current
position. A writer that crashed without knowing whether its last commit landed must settle
that operation before it reads the checkpoint again: `--loop` logs each operation (id, split
ids, positions) before it begins it, and on restart runs that same operation again, same id
and plan. That answers the truth (published: acknowledged; ended: not applied) and finishes
it otherwise; only then does the writer read the position it continues from. (Re-reading the
checkpoint alone is not enough: an operation the server still holds, confirmed or with its
begin in flight, may land after the read and make the next commit's delta stale.)

    mend_writer.py http://127.0.0.1:7600 DATASET a.split=./a.bin b.split=./b.bin
    mend_writer.py http://127.0.0.1:7600 DATASET --loop --partition p0 --log acks.jsonl
    MEND_TOKEN=mend_... mend_writer.py https://mend-1.internal:7600 DATASET a.split=./a.bin \
        --cacert ca.pem

A server with a tokens file wants a principal's secret on every request: `--token SECRET`,
`--token-file PATH` (the secret alone, as `mend token new` printed it), or `MEND_TOKEN`, in
that order. Over `https://` the server's certificate is checked against `--cacert PATH` (the
system's CAs without it); `--cert`/`--key` present a client certificate (mutual TLS). A
library user calls `configure(token=..., cafile=...)` once before the steps. The secret is
sent only in the `Authorization` header and never printed.

`--loop` commits forever on one partition, each commit moving it by 1 from the current
position, and appends every acknowledged commit to the log as one JSON line, fsynced before
the next commit begins, so whoever kills the writer can count what was acknowledged. The log
also holds a "begun" line before each operation and a "not_applied" line for one that ended;
the crash test (`cli/tests/external_writers.rs`) counts the "acknowledged" ones.

A `--loop` writer that cannot make progress says so and exits 1 rather than retry forever
unseen: when one commit has gone `--retry-for-s` seconds (300 by default) without an answer
that settles it (every step sent again after connection errors, 503s and 409s, as above;
a server restarting answers well within that), or when `--max-ended-in-a-row` operations in a
row (10 by default) ended without publishing (each one is retried as a new commit, which a
lease that ran out while the server was down explains once, not ten times).
"""

import argparse
import hashlib
import http.client
import io
import json
import os
import random
import socket
import ssl
import struct
import sys
import time
import urllib.error
import urllib.request
import uuid

REQUEST_TIMEOUT_S = 30
# The lease a writer asks for; `commit` heartbeats when a third of it has passed.
LEASE_MS = 10_000
# How long one commit retries steps whose outcome is unknown before it gives up.
RETRY_FOR_S = 300
# `--loop` gives up after this many operations in a row ended without publishing.
MAX_ENDED_IN_A_ROW = 10


class MendError(Exception):
    """An answer in mend's error form: {"error", "message", "certainly_not_applied"}, and, for
    a step refused because of how its operation stands, "operation": "published",
    "confirmed" or "ended". Verdicts are read from those fields, never from the message."""

    def __init__(self, status, body):
        self.status = status
        self.code = body.get("error", "unknown")
        self.message = body.get("message", "")
        self.certainly_not_applied = body.get("certainly_not_applied", False)
        self.operation = body.get("operation")
        super().__init__(f"{status} {self.code}: {self.message}")

    def _found(self, state):
        return (
            self.status == 412
            and self.code == "failed_precondition"
            and self.operation == state
        )

    @property
    def ended(self):
        return self._found("ended")

    @property
    def already_published(self):
        # A step sent after the operation published (a retry, or recovery finished it).
        return self._found("published")

    @property
    def confirmed(self):
        # It publishes unless another operation publishes from the same checkpoint positions
        # first: its publish answers which.
        return self._found("confirmed")


class OutcomeUnknown(Exception):
    """No answer (connection refused or broken, timeout) or a 503: retry the same step."""


class CheckpointMoved(Exception):
    """The partition is no longer where the delta starts: another commit moved it."""


class NoProgress(Exception):
    """`--loop` gave up: its operations keep ending without publishing."""


# ---------------------------------------------------------------------------------------
# Who the writer is, and whom it trusts.

_TOKEN = None
_TLS = None
_COMPACT = False


def configure(token=None, cafile=None, certfile=None, keyfile=None, compact=False):
    """Sets the principal's secret sent with every request (None: none) and, for https://,
    the CA file the server's certificate is checked against (None: the system's CAs) and an
    optional client certificate and key; with `compact`, begins are sent as compact bodies."""
    global _TOKEN, _TLS, _COMPACT
    _TOKEN = token
    _COMPACT = compact
    context = ssl.create_default_context(cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile:
        context.load_cert_chain(certfile, keyfile)
    _TLS = context


def _token_from(args):
    """--token, else the file --token-file names, else MEND_TOKEN; None if none says."""
    if args.token:
        return args.token
    if args.token_file:
        with open(args.token_file) as file:
            return file.read().strip()
    return os.environ.get("MEND_TOKEN") or None


# ---------------------------------------------------------------------------------------
# One request per step.


def _request(base_url, method, path, body=None, data=None, length=None, content_type=None):
    headers = {}
    if _TOKEN:
        headers["Authorization"] = f"Bearer {_TOKEN}"
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if content_type is not None:
        headers["Content-Type"] = content_type
    if data is not None:
        headers["Content-Length"] = str(length if length is not None else len(data))
    request = urllib.request.Request(base_url + path, data=data, method=method, headers=headers)
    try:
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S,
                                        context=_TLS) as answer:
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read()
    except urllib.error.URLError as error:
        if isinstance(error.reason, ssl.SSLError):
            # A certificate the writer does not trust is no outage: retrying cannot help.
            raise MendError(0, {"error": "tls", "message": f"{method} {path}: {error.reason}",
                                "certainly_not_applied": True}) from error
        raise OutcomeUnknown(f"{method} {path}: no answer: {error}") from error
    except ssl.SSLError as error:
        # The handshake failed after the connection opened (a client certificate the server
        # refused): retrying cannot help either.
        raise MendError(0, {"error": "tls", "message": f"{method} {path}: {error}",
                            "certainly_not_applied": True}) from error
    except (http.client.HTTPException, ConnectionError,
            socket.timeout, TimeoutError, ValueError) as error:
        # Nothing came back, or half an answer: whatever the step did, it may have done.
        raise OutcomeUnknown(f"{method} {path}: no answer: {error}") from error
    try:
        failure = MendError(status, json.loads(text))
    except ValueError:
        failure = MendError(status, {"message": text.decode(errors="replace")})
    if status == 503:
        raise OutcomeUnknown(str(failure)) from failure
    raise failure


def _operation_path(dataset, operation_id=None, step=""):
    path = f"/v1/datasets/{dataset}/operations"
    if operation_id is not None:
        path += f"/{operation_id}"
    return path + step


def plan_split(split_id, payload, metadata=None):
    """The plan of one split: size and sha256 of `payload` (bytes, or a path to a file)."""
    digest, size = hashlib.sha256(), 0
    if isinstance(payload, (bytes, bytearray)):
        digest.update(payload)
        size = len(payload)
    else:
        with open(payload, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
                size += len(chunk)
    return {
        "split_id": split_id,
        "metadata_json": json.dumps(metadata or {}),
        "size": size,
        "sha256": digest.hexdigest(),
    }


def begin(base_url, dataset, operation_id, planned_splits, checkpoint_delta=None,
          node="python-writer", lease_ms=LEASE_MS):
    body = {"operation_id": operation_id, "kind": "commit", "node": node,
            "lease_ms": lease_ms, "splits": planned_splits}
    if checkpoint_delta is not None:
        body["checkpoint_delta"] = checkpoint_delta
    if _COMPACT:
        return _request(base_url, "POST", _operation_path(dataset), data=compact_begin(body),
                        content_type=COMPACT_BODY)
    return _request(base_url, "POST", _operation_path(dataset), body)


# ---------------------------------------------------------------------------------------
# Compact bodies: the begin as bytes, as the book's HTTP API page lays them out.

COMPACT_BODY = "application/vnd.mend.compact.v1"


def _number(n):
    """An unsigned LEB128 varint: 7 bits at a time, low bits first."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _string(text):
    data = text.encode()
    return _number(len(data)) + data


def _list(items, encode):
    return _number(len(items)) + b"".join(encode(item) for item in items)


def _option(value, encode):
    return b"\x00" if value is None else b"\x01" + encode(value)


def compact_begin(body):
    """A begin's JSON body (as `begin` builds it) as a compact body."""
    def split(planned):
        return (_string(planned["split_id"]) + _string(planned["metadata_json"])
                + _number(planned["size"]) + _string(planned["sha256"]))

    def partition(delta):
        return (_string(delta["partition"]) + _option(delta.get("from_position"), _number)
                + _number(delta["to_position"]))

    def checkpoint_delta(delta):
        return _string(delta["source"]) + _list(delta["partitions"], partition)

    return b"".join([
        _option(body.get("operation_id"), _string),
        {"commit": b"\x00", "merge": b"\x01"}[body["kind"]],
        _string(body["node"]),
        _option(body.get("lease_ms"), _number),
        _list(body["splits"], split),
        _option(body.get("checkpoint_delta"), checkpoint_delta),
        _list(body.get("replaced_split_ids", []), _string),
        _option(body.get("publish_token"), _string),
    ])


def upload(base_url, dataset, operation_id, split_id, payload):
    """Streams `payload` (bytes, or a path read as it is sent) into the split's object."""
    path = _operation_path(dataset, operation_id, f"/splits/{split_id}")
    if isinstance(payload, (bytes, bytearray)):
        return _request(base_url, "PUT", path, data=bytes(payload))
    with open(payload, "rb") as file:
        return _request(base_url, "PUT", path, data=file, length=os.fstat(file.fileno()).st_size)


class _Concatenated(io.RawIOBase):
    """`prefix`, then `rest` (a binary file of `size` bytes), read as one file."""

    def __init__(self, prefix, rest, size):
        self._prefix, self._rest, self.length = prefix, rest, len(prefix) + size

    def readable(self):
        return True

    def read(self, n=-1):
        if self._prefix:
            taken = self._prefix if n < 0 else self._prefix[:n]
            self._prefix = self._prefix[len(taken):]
            return taken
        return self._rest.read(n)

    def close(self):
        self._rest.close()
        super().close()


def object_prefix(header_json):
    """What comes before the payload in a split object (the format in docs/src/writers.md): b"MENDSPL1",
    the header's length as u32 little-endian, the header exactly as begin answered it."""
    header = header_json.encode()
    return b"MENDSPL1" + struct.pack("<I", len(header)) + header


def object_sha256(prefix, payload):
    """The sha256 (hex) of the whole object: `prefix`, then the payload (bytes, or a path
    read in chunks). A presigned URL is signed over it: the store takes these bytes only."""
    digest = hashlib.sha256(prefix)
    if isinstance(payload, (bytes, bytearray)):
        digest.update(payload)
    else:
        with open(payload, "rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def upload_urls(base_url, dataset, operation_id, objects):
    """Presigned URLs for objects the writer puts itself: `objects` is [{"split_id",
    "object_sha256"}]; the answer's "objects" are [{"split_id", "url", "headers",
    "expires_at_ms"}]. 422 capability_missing where the store cannot presign (upload through
    mend there)."""
    path = _operation_path(dataset, operation_id, "/upload-urls")
    return _request(base_url, "POST", path, {"objects": objects})["objects"]


def put_presigned(signed, prefix, payload):
    """Puts the whole object (`prefix`, then the payload) straight into the store through a
    URL from `upload_urls`, with exactly the headers it came with (they are signed: the store
    refuses the PUT without them; `If-None-Match: *` makes it put-if-absent, and
    `x-amz-checksum-sha256` refuses other bytes). Raises OutcomeUnknown on any failure: the
    caller uploads through mend instead, which is always possible (an object already in
    place as planned writes nothing)."""
    if isinstance(payload, (bytes, bytearray)):
        body = _Concatenated(prefix, io.BytesIO(payload), len(payload))
    else:
        body = _Concatenated(prefix, open(payload, "rb"), os.path.getsize(payload))
    headers = dict(signed["headers"])
    headers["Content-Length"] = str(body.length)
    # No Content-Type: the store keeps what it is given, and the URL signs none.
    headers["Content-Type"] = ""
    request = urllib.request.Request(signed["url"], data=body, method="PUT", headers=headers)
    try:
        with body, urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
            answer.read()
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError,
            socket.timeout, TimeoutError, ValueError) as error:
        raise OutcomeUnknown(f"PUT to the presigned URL: {error}") from error


def heartbeat(base_url, dataset, operation_id, lease_ms=LEASE_MS):
    return _request(base_url, "POST", _operation_path(dataset, operation_id, "/heartbeat"),
                    {"lease_ms": lease_ms})


def publish(base_url, dataset, operation_id):
    return _request(base_url, "POST", _operation_path(dataset, operation_id, "/publish"), {})


def abort(base_url, dataset, operation_id):
    return _request(base_url, "POST", _operation_path(dataset, operation_id, "/abort"), {})


def show(base_url, dataset, operation_id):
    return _request(base_url, "GET", _operation_path(dataset, operation_id))


def dataset_checkpoint(base_url, dataset):
    """{source: {partition: position}}."""
    return _request(base_url, "GET", f"/v1/datasets/{dataset}").get("checkpoint", {})


# ---------------------------------------------------------------------------------------
# The whole protocol, with safe retries.


def _retrying(step, deadline):
    """Runs `step` until it answers, retrying only what may be retried with the same id."""
    pause = 0.05
    while True:
        try:
            return step()
        except OutcomeUnknown:
            if time.monotonic() > deadline:
                raise
        except MendError as error:
            # 409 conflict: another writer won a race on the catalog; nothing happened.
            if error.status != 409 or time.monotonic() > deadline:
                raise
        time.sleep(pause * (0.5 + random.random()))
        pause = min(pause * 2, 1.0)


def _phase(base_url, dataset, operation_id, deadline):
    """The operation's view, as `show` answers it."""
    return _retrying(lambda: show(base_url, dataset, operation_id), deadline)


def _delta_still_applies(base_url, dataset, checkpoint_delta, deadline):
    if checkpoint_delta is None:
        return True
    positions = _retrying(lambda: dataset_checkpoint(base_url, dataset), deadline)
    source = positions.get(checkpoint_delta["source"], {})
    return all(source.get(p["partition"]) == p["from_position"]
               for p in checkpoint_delta["partitions"])


def commit(base_url, dataset, splits, checkpoint_delta=None, operation_id=None,
           node="python-writer", metadata=None, retry_for_s=RETRY_FOR_S, direct=False):
    """Commits `splits` ({split_id: bytes or path}) with `checkpoint_delta`, crash-safely.

    With `direct`, each object goes straight into the store through a presigned URL
    (`upload_urls`, signed over the object's sha256 and put-if-absent) where the store
    presigns (S3), and through mend where it does not or the put fails.

    Returns {"operation_id", "split_ids", "publish"}: the ids that were published (with the
    `.rN` suffix if the commit had to start over) and the PublishResult. Raises
    CheckpointMoved if the commit ended without publishing and its delta no longer applies,
    OutcomeUnknown if the server did not answer for `retry_for_s`, MendError otherwise.
    """
    deadline = time.monotonic() + retry_for_s
    first_id = operation_id = operation_id or str(uuid.uuid4())
    attempt = 0
    while True:
        suffix = f".r{attempt}" if attempt else ""
        named = {split_id + suffix: payload for split_id, payload in splits.items()}
        try:
            result = _run_once(base_url, dataset, operation_id, named, checkpoint_delta,
                               node, metadata, deadline, direct=direct)
            return {"operation_id": operation_id, "split_ids": sorted(named),
                    "publish": result}
        except MendError as error:
            if not error.ended:
                raise
        # Ended without publishing: nothing of it is visible. Start over if the checkpoint
        # is still where the delta starts.
        if not _delta_still_applies(base_url, dataset, checkpoint_delta, deadline):
            raise CheckpointMoved(f"operation {operation_id} ended and the checkpoint moved")
        attempt += 1
        operation_id = f"{first_id}.r{attempt}"


def _run_once(base_url, dataset, operation_id, splits, checkpoint_delta, node, metadata,
              deadline, lease_ms=LEASE_MS, direct=False, stats=None):
    planned = [plan_split(split_id, payload, metadata) for split_id, payload in splits.items()]
    view = _retrying(lambda: begin(base_url, dataset, operation_id, planned, checkpoint_delta,
                                   node, lease_ms), deadline)
    if view["phase"] == "published":
        return view["publish"]
    answered = {split["split_id"]: split for split in view.get("splits", [])}
    signed = _presigned(base_url, dataset, operation_id, splits, answered) if direct else {}
    try:
        renewed = time.monotonic()
        for split_id, payload in splits.items():
            if time.monotonic() - renewed > lease_ms / 3000:
                _retrying(lambda: heartbeat(base_url, dataset, operation_id, lease_ms), deadline)
                renewed = time.monotonic()
            if split_id in signed:
                url, prefix = signed[split_id]
                try:
                    put_presigned(url, prefix, payload)
                    if stats is not None:
                        stats["direct_puts"] += 1
                    continue
                except OutcomeUnknown:
                    pass  # through mend instead: an object already in place writes nothing
            _retrying(lambda: upload(base_url, dataset, operation_id, split_id, payload),
                      deadline)
        return _retrying(lambda: publish(base_url, dataset, operation_id), deadline)["publish"]
    except MendError as error:
        if not error.already_published:
            raise
        # It published meanwhile (this publish sent again after it landed, or the server
        # finished it): its result is what `show` answers.
        view = _phase(base_url, dataset, operation_id, deadline)
        if view["phase"] == "published":
            return view["publish"]
        raise


def _presigned(base_url, dataset, operation_id, splits, answered):
    """{split_id: (signed URL, object prefix)} for the splits to put straight into the store;
    empty where the store cannot presign or the URLs cannot be had now (every object then goes
    through mend)."""
    prefixes = {split_id: object_prefix(answered[split_id]["header_json"])
                for split_id in splits if split_id in answered}
    objects = [{"split_id": split_id, "object_sha256": object_sha256(prefix, splits[split_id])}
               for split_id, prefix in prefixes.items()]
    if not objects:
        return {}
    try:
        urls = upload_urls(base_url, dataset, operation_id, objects)
    except (MendError, OutcomeUnknown):
        return {}
    return {url["split_id"]: (url, prefixes[url["split_id"]]) for url in urls}


# ---------------------------------------------------------------------------------------
# The command line.


def _append(log, record):
    log.write(json.dumps(record) + "\n")
    log.flush()
    os.fsync(log.fileno())


def _last_begun(log_path):
    """The last operation the log says was about to begin, if no outcome follows it."""
    pending = None
    try:
        with open(log_path) as log:
            for line in log:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if record["event"] == "begun":
                    pending = record
                elif pending and record["operation_id"] == pending["operation_id"]:
                    pending = None
    except FileNotFoundError:
        pass
    return pending


def payload_for(split_id, size):
    """Deterministic bytes for a split, so a reader can check the object is intact."""
    seed = hashlib.sha256(split_id.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def loop(base_url, dataset, partition, log_path, source="mend-writer", split_bytes=4096,
         splits_per_commit=2, stop_file=None, lease_ms=LEASE_MS, retry_for_s=RETRY_FOR_S,
         max_ended_in_a_row=MAX_ENDED_IN_A_ROW, direct=False):
    """Commits on `partition` until `stop_file` exists (with `direct`, putting objects through
    presigned URLs where the store presigns; each acknowledged line counts them). Raises OutcomeUnknown when a commit
    went `retry_for_s` without an answer that settles it, NoProgress when
    `max_ended_in_a_row` operations in a row ended without publishing, MendError on any
    other refusal."""
    node = f"writer-{partition}"
    ended_in_a_row = 0
    with open(log_path, "a") as log:
        pending = _last_begun(log_path)
        while stop_file is None or not os.path.exists(stop_file):
            if pending is None:
                try:
                    positions = _retrying(lambda: dataset_checkpoint(base_url, dataset),
                                          time.monotonic() + retry_for_s)
                except OutcomeUnknown as error:
                    raise OutcomeUnknown(
                        f"reading the checkpoint got no answer in {retry_for_s} s; giving up: "
                        f"{error}") from error
                current = positions.get(source, {}).get(partition)
                to_position = (current or 0) + 1
                operation_id = f"{partition}-{to_position}-{uuid.uuid4().hex[:8]}"
                pending = {"event": "begun", "operation_id": operation_id,
                           "partition": partition, "from_position": current,
                           "to_position": to_position,
                           "split_ids": [f"{operation_id}.s{n}"
                                         for n in range(splits_per_commit)]}
                _append(log, pending)
            # After a crash, `pending` is the operation the last run began (or was about to):
            # the same operation again, same id and plan, answers what became of it (and
            # finishes it if it had not published), whether or not its begin ever arrived.
            record, pending = pending, None
            metadata = {"partition": partition, "to_position": record["to_position"],
                        "operation_id": record["operation_id"], "splits": splits_per_commit}
            delta = {"source": source, "partitions": [
                {"partition": partition, "from_position": record["from_position"],
                 "to_position": record["to_position"]}]}
            splits = {s: payload_for(s, split_bytes) for s in record["split_ids"]}
            stats = {"direct_puts": 0}
            try:
                result = _run_once(base_url, dataset, record["operation_id"], splits, delta,
                                   node, metadata, time.monotonic() + retry_for_s, lease_ms,
                                   direct=direct, stats=stats)
            except OutcomeUnknown as error:
                raise OutcomeUnknown(
                    f"operation {record['operation_id']} got no answer that settles it in "
                    f"{retry_for_s} s; giving up: {error}") from error
            except MendError as error:
                if not error.ended:
                    raise
                # Abandoned (its lease ran out) or refused: nothing of it is visible, and the
                # next commit reads the position again.
                _append(log, dict(record, event="not_applied"))
                ended_in_a_row += 1
                if ended_in_a_row >= max_ended_in_a_row:
                    raise NoProgress(
                        f"{ended_in_a_row} operations in a row ended without publishing, the "
                        f"last {record['operation_id']}: {error}; giving up") from error
                continue
            ended_in_a_row = 0
            _append(log, dict(record, event="acknowledged",
                              manifest_version=result["manifest_version"],
                              direct_puts=stats["direct_puts"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base_url", help="the server, e.g. http://127.0.0.1:7600")
    parser.add_argument("dataset")
    parser.add_argument("splits", nargs="*", help="SPLIT_ID=FILE, committed in one operation")
    parser.add_argument("--checkpoint-delta", help="a checkpoint delta as JSON")
    parser.add_argument("--operation-id", help="an id of your choosing (safe to retry)")
    parser.add_argument("--loop", action="store_true", help="commit continuously")
    parser.add_argument("--partition", default="0")
    parser.add_argument("--source", default="mend-writer")
    parser.add_argument("--log", help="--loop: the log of acknowledged commits (JSON lines)")
    parser.add_argument("--stop-file", help="--loop: stop once this file exists")
    parser.add_argument("--lease-ms", type=int, default=LEASE_MS,
                        help="how long an operation may go without a heartbeat")
    parser.add_argument("--retry-for-s", type=float, default=RETRY_FOR_S,
                        help="how long one commit retries steps whose outcome is unknown "
                             "(no answer, 503) before the writer gives up")
    parser.add_argument("--max-ended-in-a-row", type=int, default=MAX_ENDED_IN_A_ROW,
                        help="--loop: give up after this many operations in a row ended "
                             "without publishing")
    parser.add_argument("--direct", action="store_true",
                        help="put objects straight into the store through presigned URLs "
                             "where it presigns (S3)")
    parser.add_argument("--compact", action="store_true",
                        help="send each begin as a compact body (application/vnd.mend.compact.v1)")
    parser.add_argument("--token", help="the principal's secret (or --token-file, MEND_TOKEN)")
    parser.add_argument("--token-file", help="a file holding the principal's secret")
    parser.add_argument("--cacert", help="https://: the CA file the server's certificate "
                                         "is checked against (the system's CAs without it)")
    parser.add_argument("--cert", help="https://: a client certificate (mutual TLS)")
    parser.add_argument("--key", help="the client certificate's key")
    args = parser.parse_args()
    base_url = args.base_url.rstrip("/")
    configure(token=_token_from(args), cafile=args.cacert, certfile=args.cert,
              keyfile=args.key, compact=args.compact)
    if args.loop:
        if not args.log:
            parser.error("--loop needs --log")
        loop(base_url, args.dataset, args.partition, args.log, args.source,
             stop_file=args.stop_file, lease_ms=args.lease_ms, retry_for_s=args.retry_for_s,
             max_ended_in_a_row=args.max_ended_in_a_row, direct=args.direct)
        return
    splits = dict(item.split("=", 1) for item in args.splits)
    if not splits:
        parser.error("name at least one SPLIT_ID=FILE")
    delta = json.loads(args.checkpoint_delta) if args.checkpoint_delta else None
    result = commit(base_url, args.dataset, splits, delta, args.operation_id,
                    retry_for_s=args.retry_for_s, direct=args.direct)
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        main()
    except (MendError, OutcomeUnknown, CheckpointMoved, NoProgress) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
