"""The Models page.

page        ModelsPage: its three tabs, and the check of the session's pair before loading
library     the GGUF files on this machine
presets     the catalog's downloads
recommend   the ranked pairs for this machine's memory
"""
