"""rmqinspect: offline forensic inspector for Apache RocketMQ store directories."""

__version__ = "0.1.0"
