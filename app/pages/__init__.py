"""The main window's pages, one package per page that has more than one part (the page, its panels,
its background job) and one module per page that has not: hardware.py, history.py."""
