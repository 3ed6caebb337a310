"""Serving the tuned settings to the user's own tools, and watching them there. May import
engine.measure and everything below it.

session  llama-server with the tuned settings behind the proxy; its death noticed, a restart offered
proxy    the thin OpenAI-compatible proxy (aiohttp): requests and answers passed on unchanged, streams too
watch    each request's figures from its answer's timings, the rolling view, the acceptance alert
record   the opt-in recording of chat requests as a workload set (JSONL), safe against a crash
"""
