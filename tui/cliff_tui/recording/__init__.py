"""Recordings: every event of a session as JSON lines, written as it happens and read back
into the same store. No Textual."""
