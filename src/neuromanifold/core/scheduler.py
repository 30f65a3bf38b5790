"""The Dask scheduler address: checked before any work, without importing dask.

`check_scheduler_address` reads the address (only `tcp://host:port`, or `host:port`, which Dask
reads as tcp, and the `inproc://` address of a scheduler in this process: the Dask client here is given no TLS certificates or UCX setup, so `tls://`,
`ucx://` and `ws://` addresses cannot work). `probe_scheduler` then opens a socket and waits a
bounded time for the handshake a Dask scheduler sends first on every new connection (an 8-byte
little-endian length, then that many bytes): a port that refuses, a server that never answers,
and a server that is not Dask (its first bytes do not read as a short handshake) are each one
line naming `scheduler`, exit code 2, within `seconds`. Without the probe a non-Dask server
made the client allocate what its first 8 bytes said (3 EiB), and a silent one hung it.
"""

from __future__ import annotations

import socket
import struct
import time
from urllib.parse import urlsplit

from ..errors import InputError
from .checks import bad_value, check_choice

# Largest handshake a scheduler sends (a few hundred bytes of msgpack in practice).
MAX_HANDSHAKE_BYTES = 1 << 20
# Seconds the probe waits for a connection and for the handshake (each).
PROBE_SECONDS = 10.0

_FIX = "Pass the tcp:// address `dask scheduler` prints, or drop --scheduler to use a local cluster."


def check_scheduler_address(scheduler: object) -> tuple[str, int] | None:
    """(host, port) of a `tcp://host:port` (or `host:port`) address, None for an `inproc://`
    address (a scheduler in this process, as an in-process LocalCluster gives); anything else
    is the template error naming `scheduler`."""
    if not isinstance(scheduler, str) or not scheduler.strip():
        raise bad_value("scheduler", "an address such as 'tcp://host:8786'", scheduler, _FIX)
    text = scheduler.strip()
    protocol = text.split("://", 1)[0].lower() if "://" in text else "tcp"
    if protocol == "inproc":
        return None
    if protocol != "tcp":
        raise bad_value("scheduler", "a tcp:// address (tls, ucx and other protocols need "
                        "certificates or libraries this client is not given)", scheduler, _FIX)
    parts = urlsplit(text if "://" in text else f"tcp://{text}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None or port == 0 or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username:
        raise bad_value("scheduler", "an address such as 'tcp://host:8786' (host and port)",
                        scheduler, _FIX)
    return parts.hostname, port


def probe_scheduler(scheduler: str, seconds: float = PROBE_SECONDS) -> None:
    """Refuse `scheduler` (InputError naming it) unless a Dask scheduler answers there within
    `seconds`: a connection, then its handshake frame (see the module docstring)."""
    address = check_scheduler_address(scheduler)
    if address is None:  # in this process: Dask's own connection reports it
        return
    host, port = address
    deadline = time.monotonic() + seconds

    def refuse(what: str) -> InputError:
        return bad_value("scheduler", "the address of a running Dask scheduler", scheduler,
                         f"{what}. Start one with `dask scheduler`, or drop --scheduler to use "
                         "a local cluster.")

    try:
        sock = socket.create_connection((host, port), timeout=seconds)
    except TimeoutError:
        raise refuse(f"Nothing answered within {seconds:g} s") from None
    except OSError as exc:
        raise refuse(f"Cannot connect ({exc.strerror or type(exc).__name__})") from None
    with sock:
        try:
            header = _read_exactly(sock, 8, deadline)
            (length,) = struct.unpack("<Q", header)
            if not 0 < length <= MAX_HANDSHAKE_BYTES:
                raise refuse(f"The server there is not a Dask scheduler (its first message "
                             f"announces {length} bytes)")
            _read_exactly(sock, length, deadline)
        except TimeoutError:
            raise refuse(f"The server there sent no Dask handshake within {seconds:g} s "
                         "(not a Dask scheduler, or not answering)") from None
        except (OSError, EOFError) as exc:
            raise refuse(f"The server there closed the connection before a Dask handshake "
                         f"({type(exc).__name__})") from None


def _read_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    """`n` bytes from `sock` before `deadline` (TimeoutError past it, EOFError at its end)."""
    out = bytearray()
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(min(n - len(out), 65536))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def check_backend(backend: object, scheduler: object = None) -> str:
    """`backend` ('local' or 'dask') validated, with `scheduler` given only for 'dask'."""
    backend = check_choice("backend", backend, ("local", "dask"))
    if scheduler is not None and not isinstance(scheduler, str):
        raise bad_value("scheduler", "an address such as 'tcp://host:8786'", scheduler,
                        "Pass the address the Dask scheduler prints when it starts.")
    if scheduler is not None and backend != "dask":
        raise bad_value("scheduler", "given only with --backend dask", scheduler,
                        "Add --backend dask, or drop --scheduler.")
    if scheduler is not None:
        check_scheduler_address(scheduler)
    return backend
