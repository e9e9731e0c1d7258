"""portholders names the process in the way of a pod's bind (read from /proc; Linux)."""

import os
import socket
import sys

import pytest

from portholders import explain_bind_failure, holders, listening

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_listener_on_the_address_or_on_every_address_is_named_with_its_pid() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        found = holders("127.0.0.1", port)
        assert len(found) == 1 and found[0].startswith(f"pid {os.getpid()} (127.0.0.1:{port}): ")
        assert holders("127.0.0.2", port) == []  # another loopback address: no collision
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        # a wildcard listener blocks a bind to any address on that port
        assert holders("127.64.1.3", port)[0].startswith(f"pid {os.getpid()} (0.0.0.0:{port})")
        log = (f"OSError: [Errno 98] error while attempting to bind on address ('127.64.1.3', {port}): "
               "address already in use\n")
        assert explain_bind_failure(log).startswith(f"127.64.1.3:{port} is held by pid {os.getpid()} ")
    assert explain_bind_failure(log) == f"127.64.1.3:{port} is held by no process found now"
    assert explain_bind_failure("Traceback ...\nValueError: bad flag\n") == ""


def test_a_socket_that_only_connects_is_not_a_holder() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            # the server side of the connection (in the accept queue) is on the same local port, established
            assert list(listening(port).values()) == ["127.0.0.1"]
