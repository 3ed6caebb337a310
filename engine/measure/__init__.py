"""Measuring a pair: one generation through the worker (generate), the live session behind the Lab's
charts (live), the auto-tuner, validation against a real llama-server, the headless demo, and the
SQLite history of every result.

May import engine.deploy and everything below it.
"""
