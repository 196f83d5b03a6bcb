"""ringleader: place distributed deep-learning training well, run it, measure it."""
__version__ = "0.1.0"
