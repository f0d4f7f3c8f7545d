"""A 300 MiB body sent to a real `relay api`: refused with 413, the API process stays up, and its memory does not
grow past the configured limit (nor keep what it read)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devtools.processes import RelayProcess
from devtools.stack import Stack

pytestmark = pytest.mark.integration

MIB = 1 << 20
HUGE_MIB = 300


@pytest.fixture(scope="module")
def api(fuzz_stack: Stack) -> Iterator[RelayProcess]:
    process = fuzz_stack.start_api()
    yield process
    process.stop()
    fuzz_stack.processes.remove(process)


def _worker_pid(api: RelayProcess) -> int:
    (pid,) = Path(f"/proc/{api.proc.pid}/task/{api.proc.pid}/children").read_text().split()
    return int(pid)


def _memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (the peak so far) of PID, in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


def _post_huge(url: str, path: str, key: str, *, chunked: bool) -> bytes:
    """POST HUGE_MIB of body (declared with Content-Length, or chunked with no length) and return the answer the
    server sends; the server may answer and close before the body is all sent."""
    host, port = url.removeprefix("http://").split(":")
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {HUGE_MIB * MIB}\r\n\r\n"
    piece = b"[" * MIB
    answer = b""
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode())
        try:
            for _ in range(HUGE_MIB):
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                sock.setblocking(False)
                try:
                    answer = sock.recv(65536)
                except BlockingIOError:
                    pass
                sock.setblocking(True)
                if answer:
                    break
            else:
                if chunked:
                    sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed while we were still sending
        deadline = time.monotonic() + 60
        while not _complete(answer) and time.monotonic() < deadline:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    return answer


def _complete(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return bool(sep) and len(body) >= int(line.split(b":")[1])
    return False


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_300_mib_batch_is_refused_with_413_without_the_api_holding_it(api: RelayProcess, fuzz_stack: Stack,
                                                                       fuzz_key: str, chunked: bool) -> None:
    pid = _worker_pid(api)
    before = _memory_kib(pid)
    limit_kib = fuzz_stack.settings.batch_max_bytes // 1024

    answer = _post_huge(api.url, "/v1/batches", fuzz_key, chunked=chunked)

    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b'"code":"payload_too_large"' in answer
    assert requests.get(f"{api.url}/readyz", timeout=10).status_code == 200
    assert _worker_pid(api) == pid  # the same worker process answered: nothing crashed
    after = _memory_kib(pid)
    if chunked:  # no length to refuse it by: read up to the limit, never beyond, never twice
        assert after["VmHWM"] - before["VmRSS"] < limit_kib * 1.25
    else:  # refused from its Content-Length, before reading it
        assert after["VmHWM"] - before["VmHWM"] < 64 * 1024
    assert after["VmRSS"] - before["VmRSS"] < 64 * 1024  # what it read was handed back


def test_a_declared_length_is_not_held_in_memory_before_its_bytes_arrive(api: RelayProcess, fuzz_stack: Stack,
                                                                        fuzz_key: str) -> None:
    """A body is received straight into its buffer (app/api/bodies.py), which grows with what arrives: a client
    declaring a length just under the limit and sending 1 MiB of it costs the worker about 1 MiB, not the length."""
    pid = _worker_pid(api)
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux)
    before = _memory_kib(pid)
    host, port = api.url.removeprefix("http://").split(":")
    declared = fuzz_stack.settings.batch_max_bytes - MIB
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(f"POST /v1/batches HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {fuzz_key}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode() + b" " * MIB)
        sock.shutdown(socket.SHUT_WR)  # and nothing more
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    assert _memory_kib(pid)["VmHWM"] - before["VmRSS"] < 16 * 1024
