"""The ``spectune`` command line: one module per command group (run, models, catalog, library,
deploy), the shared arguments (args), one way to fail (errors), and the parser (main).

Parsing and printing only: the work lives in the packages below. Nothing imports engine.cli.
"""
