"""The Textual front end: renders what the core computed, computes nothing of its own."""
