"""The Export page.

page    ExportPage: the llama-server command for the session's settings, and its validation
runner  the ValidateRunner thread: the command checked against a real llama-server
"""
