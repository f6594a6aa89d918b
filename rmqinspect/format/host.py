"""Socket addresses as RocketMQ stores them: raw IPv4/IPv6 bytes followed by an i32 port."""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from rmqinspect.errors import DecodeError


@dataclass(frozen=True, slots=True)
class HostAddress:
    ip: bytes  # 4 bytes (IPv4) or 16 bytes (IPv6), network order
    port: int

    @property
    def is_v6(self) -> bool:
        return len(self.ip) == 16

    @property
    def ip_text(self) -> str:
        return str(ipaddress.ip_address(self.ip))

    @property
    def host_text(self) -> str:
        """The address part of ``str()``: IPv6 in brackets, so the port stays unambiguous."""
        return f"[{self.ip_text}]" if self.is_v6 else self.ip_text

    def __str__(self) -> str:
        return f"{self.host_text}:{self.port}"

    def encode(self) -> bytes:
        return self.ip + struct.pack(">i", self.port)

    @classmethod
    def parse(cls, text: str) -> HostAddress:
        """Parse ``ip:port`` or ``[ipv6]:port``."""
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise DecodeError(f"not an ip:port address: {text!r}")
        host = host.strip("[]")
        try:
            ip = ipaddress.ip_address(host)
        except ValueError as exc:
            raise DecodeError(f"not an ip:port address: {text!r}") from exc
        return cls(ip.packed, int(port))


def decode_host(buf: bytes | memoryview, offset: int, v6: bool) -> HostAddress:
    n = 16 if v6 else 4
    ip = bytes(buf[offset : offset + n])
    (port,) = struct.unpack_from(">i", buf, offset + n)
    return HostAddress(ip, port)


def host_text_column(ip: pa.Array, port: pa.Array) -> pa.Array:
    """``str(HostAddress)`` for a column of raw addresses (binary) and ports (int32).

    A store holds few distinct addresses, so each is formatted once and the text is taken per row.
    """
    encoded = pc.dictionary_encode(ip)
    texts = pa.array(
        [HostAddress(raw, 0).host_text for raw in encoded.dictionary.to_pylist()], pa.string()
    )
    return pc.binary_join_element_wise(texts.take(encoded.indices), pc.cast(port, pa.string()), ":")
