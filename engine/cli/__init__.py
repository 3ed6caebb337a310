"""The ``spectune`` command line. Parsing and printing only: the work lives in the packages below, and
nothing imports engine.cli.

  main      the parser of every subcommand, and the one place errors end
  args      the arguments several commands share: the model pair, the load and the knobs
  errors    one way for every subcommand to fail: a line on stderr and exit status 2
  run       the measuring commands: run, demo, tune, server-path, gui
  models    hardware and model files: hardware, inspect, compat, plan, fit
  catalog   the catalog: what to run (recommend), the one-click presets
  library   model files to get (download) and files already here (library)
  predict   how fast a pair will run here, and whether speculation pays, before it runs
  deploy    export, validate and history
  serve     serve: the settings behind SpecTune's proxy, each request of the user's traffic watched
"""
