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

    def __str__(self) -> str:
        if self.is_v6:
            return f"[{self.ip_text}]:{self.port}"
        return f"{self.ip_text}:{self.port}"

    def encode(self) -> bytes:
        return self.ip + struct.pack(">i", self.port)
