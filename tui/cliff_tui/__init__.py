"""cliff-tui: find the context cliff of local LLMs.

The core (events, probes, engine, analysis, recording) imports nothing from Textual;
``cliff_tui.ui`` renders what the core computed.
"""

__version__ = "0.1.0"
