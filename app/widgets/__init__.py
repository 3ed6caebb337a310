"""Widgets and look shared by the pages: the colours (style), form fields (forms), the message banner,
page shortcuts, and the charts, text and table the Lab and Tune pages paint."""
