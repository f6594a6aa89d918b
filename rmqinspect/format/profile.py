"""Version profiles: the RocketMQ store behaviours that differ between broker lines."""

from __future__ import annotations

from enum import StrEnum


class Profile(StrEnum):
    """A broker line whose on-disk format and recovery rules rmqinspect reproduces.

    ``4.9`` is 4.9.x (checked against 4.9.8), ``5.1`` is 5.0-5.1.x (5.1.4),
    ``5.3`` is 5.3.2+ (5.3.3).
    """

    V4_9 = "4.9"
    V5_1 = "5.1"
    V5_3 = "5.3"

    @property
    def accepts_v2_magic(self) -> bool:
        return self is not Profile.V4_9

    @property
    def properties_trailing_separator(self) -> bool:
        """Whether the writer of this line ends the properties string with 0x02 (5.2.0+)."""
        return self is Profile.V5_3

    @property
    def has_bounds_checks(self) -> bool:
        """5.3.2+ checks the remaining bytes before trusting TOTALSIZE."""
        return self is Profile.V5_3

    @property
    def supports_prop_crc(self) -> bool:
        return self is Profile.V5_3

    @property
    def checkpoint_has_confirm_offset(self) -> bool:
        return self is not Profile.V4_9
