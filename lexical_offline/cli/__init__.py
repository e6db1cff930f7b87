"""Command-line programs, installed as console entry points (setup.py)."""
