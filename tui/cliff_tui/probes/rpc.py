"""What an ``rpc-server`` (llama.cpp's RPC backend) serves: its protocol version and each device's
free and total memory, asked over ggml-rpc's own protocol (HELLO, DEVICE_COUNT, GET_DEVICE_MEMORY).

An rpc-server serves one client at a time: asked while a llama-server holds it, it does not answer.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from cliff_tui.errors import BadInput

HELLO, DEVICE_COUNT, GET_DEVICE_MEMORY = 14, 15, 11  # ggml-rpc's rpc_cmd values
CONN_CAPS = 24  # RPC_CONN_CAPS_SIZE: all zero asks for plain TCP


@dataclass(frozen=True)
class RpcInfo:
    endpoint: str
    version: tuple[int, int, int]
    memory: tuple[tuple[int, int], ...]  # (free, total) bytes per device


def rpc_hello(endpoint: str, timeout: float = 10.0) -> RpcInfo:
    """The server's protocol version and each device's memory; :class:`BadInput` (one line) where
    the endpoint is not an rpc-server."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            # Close with a reset, not a FIN: a busy rpc-server reads a queued hello later and its reply to a
            # half-closed socket kills it with SIGPIPE; after a reset it reads an error and writes nothing.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            reply = _call(sock, HELLO, bytes(CONN_CAPS), 4 + CONN_CAPS, endpoint)
            count = struct.unpack("<I", _call(sock, DEVICE_COUNT, b"", 4, endpoint))[0]
            memory = tuple(
                struct.unpack("<QQ", _call(sock, GET_DEVICE_MEMORY, struct.pack("<I", dev), 16, endpoint))
                for dev in range(count)
            )
    except TimeoutError:
        raise BadInput(
            f"{endpoint} did not answer an RPC hello in {timeout:g} s: not an rpc-server, or one busy with "
            "another client (an rpc-server serves one at a time, such as the llama-server using it)"
        ) from None
    except ConnectionRefusedError:
        raise BadInput(
            f"{endpoint} refused the connection: nothing listens there, or an rpc-server busy with another "
            "client (it serves one at a time, such as the llama-server using it)"
        ) from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot reach the rpc-server {endpoint}: {exc}") from None
    return RpcInfo(endpoint, (reply[0], reply[1], reply[2]), memory)


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _call(sock: socket.socket, cmd: int, payload: bytes, reply_size: int, endpoint: str) -> bytes:
    sock.sendall(bytes([cmd]) + struct.pack("<Q", len(payload)) + payload)
    head = _recv(sock, 8)
    if len(head) < 8:
        raise BadInput(f"{endpoint} is not an rpc-server: it closed the connection after an RPC hello ({head!r})")
    (size,) = struct.unpack("<Q", head)
    if size != reply_size:
        raise BadInput(f"{endpoint} is not an rpc-server: it answered {(head + sock.recv(40))[:48]!r} to an RPC hello")
    return _recv(sock, size)
