"""`tinyllm-tui serve`: the debugger for a class, in the browser, one confined session per learner.

Built on textual-serve (the `serve` extra), whose aiohttp server runs one app process per websocket:
`lessons` holds what is served and how each session's folder is filled, `session` one learner's process
and its limits, `server` the web server (access, pages, the session count).
"""
