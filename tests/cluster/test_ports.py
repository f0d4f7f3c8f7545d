"""The local cluster's member ports: claimed below the ephemeral range, never by two live clusters at once, and
reclaimed once their cluster's directory is gone."""

from __future__ import annotations

import os
from pathlib import Path

from devtools.cluster.ports import LOWEST, _claim, ephemeral_start, reserve


def test_two_live_clusters_never_share_a_port_and_none_is_in_the_ephemeral_range(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = reserve(6, tmp_path / "one", tmp_path / "claims")
    second = reserve(6, tmp_path / "two", tmp_path / "claims")
    assert len(set(first)) == len(set(second)) == 6
    assert not set(first) & set(second)
    assert all(LOWEST <= port < ephemeral_start() for port in first + second)


def test_the_ports_of_a_removed_cluster_are_claimed_again(tmp_path: Path) -> None:
    (tmp_path / "gone").mkdir()
    (tmp_path / "next").mkdir()
    claims = tmp_path / "claims"
    first = reserve(4, tmp_path / "gone", claims)
    assert not _claim(first[0], tmp_path / "next", claims)  # its cluster lives: the claim holds
    (tmp_path / "gone").rmdir()
    assert all(_claim(port, tmp_path / "next", claims) for port in first)
    assert {os.readlink(claims / str(port)) for port in first} == {str(tmp_path / "next")}
