"""Ports for the members of a local cluster that cannot bind port 0 themselves (RabbitMQ, Postgres and its monitor).

A port found free and bound later by another process is a race: meanwhile any process binding port 0 may get it
(the cluster tests once failed on exactly that). So the ports come from below the kernel's ephemeral range, which
a bind to port 0 never hands out, and each is claimed for its cluster by a symbolic link named after it under
CLAIMS, pointing at the cluster's directory (atomic: two clusters never claim one port). A claim is stale once its
cluster's directory is gone.

Usage: python -m devtools.cluster.ports COUNT CLUSTER_DIR   (prints COUNT ports, space-separated)
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

CLAIMS = Path(os.environ.get("RELAY_PORT_CLAIMS", tempfile.gettempdir() + "/relay-cluster-ports"))
LOWEST = 26000  # above the fixed ports of scripts/services.sh and dev.sh (..., 257xx)


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (what a bind to port 0 picks from)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def reserve(count: int, owner: Path, claims: Path = CLAIMS) -> list[int]:
    """Claim COUNT ports for the cluster under OWNER: free now, outside the ephemeral range, claimed by no other
    live cluster. Raises RuntimeError when the band has not enough of them."""
    claims.mkdir(mode=0o777, parents=True, exist_ok=True)
    found: list[int] = []
    for port in range(LOWEST, ephemeral_start()):
        if len(found) == count:
            break
        if _claim(port, owner.resolve(), claims):
            if _free(port):
                found.append(port)
            else:  # in use by something that does not claim: leave it, and release the claim
                _release(port, claims)
    if len(found) < count:
        for port in found:
            _release(port, claims)
        raise RuntimeError(f"only {len(found)} of {count} ports free in {LOWEST}..{ephemeral_start() - 1}")
    return found


def _claim(port: int, owner: Path, claims: Path) -> bool:
    """Claim PORT for OWNER: a symbolic link named after the port, pointing at OWNER (created at once, with its
    owner). A stale claim is set aside by an atomic rename first; should a fresh claim have replaced it meanwhile,
    that one is put back."""
    path = claims / str(port)
    for _ in range(2):
        try:
            os.symlink(owner, path)
            return True
        except FileExistsError:
            holder = _holder(path)
            if holder is None or holder.exists():
                return False
            aside = claims / f".stale-{port}-{os.getpid()}"
            try:
                os.rename(path, aside)
            except OSError:
                return False  # another cluster set it aside first
            moved = _holder(aside)
            aside.unlink(missing_ok=True)
            if moved != holder:
                if moved is not None:
                    _put_back(moved, path)
                return False
    return False


def _put_back(owner: Path, path: Path) -> None:
    try:
        os.symlink(owner, path)
    except FileExistsError:
        pass


def _holder(path: Path) -> Path | None:
    try:
        return Path(os.readlink(path))
    except OSError:  # removed right now
        return None


def _release(port: int, claims: Path) -> None:
    (claims / str(port)).unlink(missing_ok=True)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


if __name__ == "__main__":
    print(" ".join(str(p) for p in reserve(int(sys.argv[1]), Path(sys.argv[2]))))
