"""What-if: replay the trace as a dependency graph, with detector fixes applied as graph transformations.

graph.py builds the graph, replay.py simulates it, engine.py applies fixes and reads predictions off.
"""
