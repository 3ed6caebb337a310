"""The Lab page: a model pair run live while its knobs move.

page       LabPage: runs, loads, the charts and the engine's events
controls   LabControls, the knob panel the app's session (app.session) is bound to, so that the other
           pages read and set the pair, the knobs and the prompts without reaching into the Lab
knob_help  what every knob does, the llama-server flag it becomes, and that flag's default
"""
