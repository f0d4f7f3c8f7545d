"""The upstream client's check for a dropped keep-alive connection uses the OS's poll, also where gevent patched
select (`relay api`): it answers at once, without a trip through gevent's hub that would run other greenlets."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

from app.pipeline.upstream import _dropped

PATCHED = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()
    import select, socket
    import gevent
    from app.blocking import os_poll
    from app.pipeline.upstream import _dropped

    assert os_poll() is monkey.get_original("select", "poll") and os_poll() is not select.poll
    ran = []
    gevent.spawn(ran.append, 1)  # runs only once this greenlet yields to the hub
    ours, theirs = socket.socketpair()
    assert not _dropped(ours)
    theirs.close()
    assert _dropped(ours)
    assert ran == [], "the check switched to gevent's hub"
    gevent.sleep(0)
    assert ran == [1]
    print("ok")
""")


def test_a_socket_is_dropped_once_its_peer_closes_it() -> None:
    ours, theirs = socket.socketpair()
    with ours:
        assert not _dropped(ours)
        theirs.sendall(b"x")  # an idle keep-alive connection with bytes waiting is not reusable either
        assert _dropped(ours)
    ours, theirs = socket.socketpair()
    with ours:
        theirs.close()
        assert _dropped(ours)


def test_under_gevent_the_check_does_not_switch_to_the_hub() -> None:
    done = subprocess.run([sys.executable, "-c", PATCHED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
