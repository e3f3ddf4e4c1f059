"""The `dsdsim` command line: thin commands over the public API.

One module per command group, each registering its commands on the one app (``dsdsim.cli.command``, the
command-line framework) when it is imported; a run imports only the group it names (``load_commands``:
``dsdsim predict`` loads model.py alone):

    model.py     explain, predict, plan, accuracy      (the simulator and the K policy)
    bench.py     probe, validate, loop, comm-check, calibrate   (measuring with torch)
    catalog.py   list models|hardware, show model|hardware
    engine.py    list engines, show engine, and calibrate --measurements (fit an engine spec to your points)
    plots.py     plot roofline|sensitivity

Options shared by several commands are declared once in options.py; output files, progress and torch checks
live in output.py; tables (dsdsim.export.text) and JSON are built by dsdsim.export.render.
"""
from dsdsim.cli.app import app, load_commands, main

__all__ = ["app", "load_commands", "main"]
