"""A client's ``MessageClientIDSetter``: the UNIQ_KEYs (and trace request ids) a Java client
makes; shared by the workload's producers and the fate model's tracing clients."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


def _month_start_ms(ms: int) -> int:
    day = datetime.fromtimestamp(ms // 1000, UTC)
    return int(datetime(day.year, day.month, 1, tzinfo=UTC).timestamp()) * 1000


@dataclass(slots=True)
class ClientIds:
    """``MessageClientIDSetter``: a fixed prefix (ip, pid, class loader hash), then the time
    since the start of the month and a wrapping counter; the month is taken in UTC here."""

    prefix: str
    counter: int = 0
    month_start: int = 0
    month_end: int = -1

    def next_id(self, born_ms: int) -> str:
        if not self.month_start <= born_ms < self.month_end:
            self.month_start = _month_start_ms(born_ms)
            self.month_end = _month_start_ms(self.month_start + 32 * 86_400_000)
        uid = f"{self.prefix}{born_ms - self.month_start:08X}{self.counter:04X}"
        self.counter = (self.counter + 1) & 0xFFFF
        return uid
