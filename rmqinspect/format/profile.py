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
    def checked_against(self) -> str:
        """The release this line's rules were checked against: the broker version assumed when
        a rule that changed inside a line (``getMessage``'s reset in 4.9.4) must be applied."""
        return {Profile.V4_9: "4.9.8", Profile.V5_1: "5.1.4", Profile.V5_3: "5.3.3"}[self]

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

    # --- restart recovery (§1.2, §10) -------------------------------------------------------

    @property
    def deletes_zero_length_last_file(self) -> bool:
        """5.x ``MappedFileQueue.doLoad`` deletes a zero-length last file (4.9 fails to load)."""
        return self is not Profile.V4_9

    @property
    def skips_directories_in_file_lists(self) -> bool:
        """5.x skips directories among a family's files (4.9 fails on their length)."""
        return self is not Profile.V4_9

    @property
    def normal_recovery_starts_at_cq_max(self) -> bool:
        """5.3.2+ ``recoverNormally`` starts at the newest file the consume queues reach (and
        dispatches what they lack); earlier lines start at the third file from the end."""
        return self is Profile.V5_3

    @property
    def delay_levels_loaded_before_recovery(self) -> bool:
        """4.9.8 parses ``messageDelayLevel`` only after recovery, so records dispatched during
        ``load()`` get tag hashes even in ``SCHEDULE_TOPIC_XXXX``; 5.x parses it first."""
        return self is not Profile.V4_9

    @property
    def tracks_confirm_offset(self) -> bool:
        """5.x recovery sets the confirm offset (persisted at checkpoint byte 32) and the reput
        service starts there and never dispatches past it; 4.9 starts the reput at the consume
        queues' max physical offset and runs to the commitlog's max offset."""
        return self is not Profile.V4_9

    @property
    def correct_min_offset_binary_search(self) -> bool:
        """5.x ``correctMinOffset`` (empty-queue shortcut, binary search); 4.9 scans linearly."""
        return self is not Profile.V4_9

    @property
    def recovers_topic_queue_table_after_reput(self) -> bool:
        """4.9.8 ``start()`` runs ``recoverTopicQueueTable`` again once the reput caught up."""
        return self is Profile.V4_9
