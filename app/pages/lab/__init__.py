"""The Lab page: a model pair run live while its knobs move. ``page`` holds LabPage (runs, loads, the
charts and the engine's events); ``controls`` holds LabControls, the panel of widgets the app's
session (app.session) is bound to, so that the other pages read and set the pair, the knobs and the
prompts without reaching into the Lab."""
