"""Message bodies compressed by the producer: the codec sysFlag names, decompression with a
bound, and compression the way each producer line does it (for ``synth``).

What RocketMQ does (cited from its source):

* sysFlag bit 0 (``MessageSysFlag.COMPRESSED_FLAG = 0x1``) marks a compressed body. 4.x
  producers (``DefaultMQProducerImpl.tryToCompressMessage``) compress a body of at least
  ``compressMsgBodyOverHowmuch`` bytes (4096) with ``UtilAll.compress``: a zlib stream
  (``java.util.zip.Deflater``) at level ``zipCompressLevel`` (5). Batches are never compressed.
* 5.x keeps that rule and records the codec in sysFlag bits 8-10
  (``MessageSysFlag.COMPRESSION_TYPE_COMPARATOR = 0x7 << 8``, ``getCompressionType``):
  ``CompressionType.findByValue`` reads 1 as LZ4, 2 as ZSTD, 3 as ZLIB and 0 as ZLIB too ("to be
  compatible for older versions without compression type"); other values throw. The producer
  default is ZLIB at level 5 (``rocketmq.message.compressType``/``compressLevel``).
* ``ZlibCompressor`` is ``Deflater(level)``/``InflaterInputStream`` (the zlib format);
  ``ZstdCompressor`` is zstd-jni's ``ZstdOutputStream(level)``/``ZstdInputStream`` (zstd
  frames, read across frames); ``Lz4Compressor`` is ``LZ4FrameOutputStream``/
  ``LZ4FrameInputStream`` (the LZ4 *frame* format with its defaults: 4 MiB independent blocks,
  no content size, no content checksum; the level is ignored).
* The broker stores the body as sent: BODYCRC is computed over the stored (compressed) bytes.
  The client decompresses on decode (``MessageDecoder.decode(..., deCompressBody=true)``).

Decompression is bounded: hostile input (a decompression bomb) never allocates more than
:data:`MAX_BODY` bytes per body plus one step's output.
"""

from __future__ import annotations

import zlib
from enum import StrEnum
from typing import NamedTuple

import lz4.frame
import zstandard

from rmqinspect.format import commitlog as cl

# A producer refuses a body over its maxMessageSize (4 MiB by default) before compressing it;
# 16 times that leaves room for a raised setting and bounds what one record can cost.
MAX_BODY = 64 * 1024 * 1024
COMPRESS_OVER = 4096  # compressMsgBodyOverHowmuch
COMPRESS_LEVEL = 5  # zipCompressLevel (4.x), compressLevel (5.x)
# zstd's output per input byte is bounded (an RLE block: 128 KiB from a few bytes), so feeding
# it this much at a time bounds each step's output to a few MiB.
_ZSTD_STEP = 256


class Codec(StrEnum):
    """The codecs of ``CompressionType``, by the names :func:`cl.compression_name` gives."""

    ZLIB = "zlib"
    ZSTD = "zstd"
    LZ4 = "lz4"


# CompressionType values as sysFlag bits 8-10 (MessageSysFlag.COMPRESSION_*_TYPE).
_TYPE_VALUES = {Codec.LZ4: 1, Codec.ZSTD: 2, Codec.ZLIB: 3}


class DecompressError(ValueError):
    """A compressed body that does not decompress; the message says why."""


def compression_flags(codec: Codec, five_x: bool) -> int:
    """The sysFlag bits a producer sets for a body it compressed with ``codec``: 4.x sets only
    COMPRESSED_FLAG (and compresses with zlib only), 5.x adds the codec's type bits
    (``CompressionType.getCompressionFlag``)."""
    if not five_x:
        if codec is not Codec.ZLIB:
            raise ValueError(f"4.x producers compress with zlib only, not {codec}")
        return cl.COMPRESSED_FLAG
    return cl.COMPRESSED_FLAG | _TYPE_VALUES[codec] << 8


def compress(body: bytes, codec: Codec, level: int = COMPRESS_LEVEL) -> bytes:
    """``body`` as the producer's compressor writes it."""
    if codec is Codec.ZLIB:
        return zlib.compress(body, level)
    if codec is Codec.ZSTD:
        # ZstdOutputStream streams: the frame header carries no content size.
        return zstandard.ZstdCompressor(level=level, write_content_size=False).compress(body)
    return bytes(
        lz4.frame.compress(
            body,
            block_size=lz4.frame.BLOCKSIZE_MAX4MB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    )


def decompress(stored: bytes, sys_flag: int, limit: int = MAX_BODY) -> bytes:
    """The body a consumer gets from the ``stored`` bytes of a record whose sysFlag says they
    are compressed. Raises :class:`DecompressError` for an unknown codec, bytes that are not
    the codec's format or end early, and output over ``limit`` bytes."""
    name = cl.compression_name(sys_flag)
    if name is None:
        return stored
    try:
        codec = Codec(name)
    except ValueError:
        raise DecompressError(f"sysFlag names no codec RocketMQ knows: {name}") from None
    try:
        if codec is Codec.ZLIB:
            return _zlib(stored, limit)
        if codec is Codec.ZSTD:
            return _zstd(stored, limit)
        return _lz4(stored, limit)
    except (zlib.error, zstandard.ZstdError, RuntimeError) as exc:
        raise DecompressError(f"{codec}: {exc}") from None


def _too_large(codec: Codec, limit: int) -> DecompressError:
    return DecompressError(f"{codec}: decompresses to more than {limit} bytes")


def _zlib(stored: bytes, limit: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(stored, limit + 1)
    if len(out) > limit:
        raise _too_large(Codec.ZLIB, limit)
    if not d.eof:
        raise DecompressError("zlib: the stream ends early")
    return out  # like InflaterInputStream, bytes after the stream's end are ignored


def _zstd(stored: bytes, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    rest = stored
    while rest:  # ZstdInputStream reads frame after frame
        d = zstandard.ZstdDecompressor().decompressobj()
        fed = 0
        while fed < len(rest) and not d.eof:
            chunk = d.decompress(rest[fed : fed + _ZSTD_STEP])
            fed += _ZSTD_STEP
            size += len(chunk)
            if size > limit:
                raise _too_large(Codec.ZSTD, limit)
            parts.append(chunk)
        if not d.eof:
            raise DecompressError("zstd: the frame ends early")
        rest = d.unused_data + rest[fed:]
    if not parts:
        raise DecompressError("zstd: no frame")
    return b"".join(parts)


def _lz4(stored: bytes, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    rest = stored
    while rest:  # LZ4FrameInputStream reads frame after frame
        d = lz4.frame.LZ4FrameDecompressor()
        chunk = bytes(d.decompress(rest, max_length=limit + 1 - size))
        size += len(chunk)
        if size > limit:
            raise _too_large(Codec.LZ4, limit)
        parts.append(chunk)
        if not d.eof:
            raise DecompressError("lz4: the frame ends early")
        rest = d.unused_data
    if not parts:
        raise DecompressError("lz4: no frame")
    return b"".join(parts)


class ConsumerBody(NamedTuple):
    """What a record's body is for its consumer: the decompressed bytes of a compressed body,
    else the stored bytes; ``error`` says why a compressed body could not be decompressed
    (``body`` is then the stored bytes)."""

    body: bytes
    decompressed: bool
    error: str | None


def consumer_body(stored: bytes, sys_flag: int, limit: int = MAX_BODY) -> ConsumerBody:
    """:func:`decompress` as data: never raises."""
    if not sys_flag & cl.COMPRESSED_FLAG:
        return ConsumerBody(stored, False, None)
    try:
        return ConsumerBody(decompress(stored, sys_flag, limit), True, None)
    except DecompressError as exc:
        return ConsumerBody(stored, False, str(exc))
