"""Middleware base class and built-in middlewares."""

from agentrt.middleware.base import Middleware

__all__ = ["Middleware"]
