"""The Tune page: ``page`` holds TunePage (inputs, progress, the ranked result and the way back to the
Lab) and ``runner`` the TuneRunner thread that runs one auto-tune against an engine worker of its own."""
