"""Pure codecs for RocketMQ store bytes: no file I/O, no printing.

Each module takes ``bytes``/``memoryview`` (or builds them) and raises
:class:`rmqinspect.errors.DecodeError` on bad input.
"""
