"""Measurement on a real device with torch (imported only here): probe, validate, calibrate, the real loop.

Nothing outside this package imports it except the CLI."""
