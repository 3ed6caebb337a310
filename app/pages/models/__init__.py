"""The Models page: ``page`` holds ModelsPage (its three tabs and the check of the session's pair before
loading), ``library`` the GGUF files on this machine, ``presets`` the downloads, ``recommend`` the ranked
pairs for this machine's memory, and ``background`` the thread that runs one engine function for any of
them."""
