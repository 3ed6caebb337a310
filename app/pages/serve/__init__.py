"""The Serve page.

page    ServePage: the Lab's settings served behind SpecTune's proxy, its base URL, start, stop, restart
charts  each request's tokens/s and acceptance as they come, in the Lab's style
"""
