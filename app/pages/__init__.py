"""The main window's pages: one package per page with more than one part (the page, its panels, its
background job), one module per page without.

  start     the Start page: a guide in three steps for a new user
  models    what is on this machine, what to get, and the session's pair checked
  lab       run a pair live while the knobs move
  tune      find the fastest speculation setting for the Lab's pair
  export    the llama-server command for the Lab's settings, validated against a real server
  serve     the Lab's settings served to the user's own tools, their requests watched, a retune offered
  hardware  every NVIDIA GPU, the CPU and RAM, and this CPU's measured speed
  history   the runs kept in the SQLite history
"""
