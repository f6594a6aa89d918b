"""Socket addresses as RocketMQ stores them: raw IPv4/IPv6 bytes followed by an i32 port."""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass


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
