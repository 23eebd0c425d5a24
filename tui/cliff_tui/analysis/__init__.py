"""The maths: signs, the decode-speed fit, triangulation, projection, KV theory. No Textual."""
