"""Widgets and look the pages share.

style          the app's colours in one place, light and dark, and rich text in them
theme          light or dark, following the system's colour scheme
icons          the app's icon and one line icon per page
navigation     the page list on the left of the main window
page_shortcuts  keyboard shortcuts that belong to one page
banner         a message strip at the top of a page, with an optional action
needs_pair     a strip on pages that need the session's model pair, while there is none
empty_state    what a page shows where its list would be empty
timers         the pages' timers, made in one line
pace           how long a long action has taken and about how long it has left
forms          form fields: buttons, number boxes, a GGUF file picker, several fields on a row
wheel_guard    the mouse wheel scrolls the page and changes a knob only when it has the focus
workload_box   the workload list the Lab and the Tune page share
live_charts    the Lab's charts, painted from engine.measure.live snapshots
chart_legend   a chart's legend in its title row, where it hides no data
chart_stack    a chart's sentence on what it will show, in place of bare axes until there is data
chart_ranges   axis ranges that move in steps, so the charts do not re-lay out every frame
token_text     streamed output text, with the accepted drafts' tokens coloured
tune_charts    the Tune page's two charts
tune_table     the Tune page's result table
"""
