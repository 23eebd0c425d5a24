"""Running llama-server and Ollama, read over HTTP: one :class:`~cliff_tui.events.ServerReading` per
call, network trouble never raised. ``http`` and ``prometheus`` are shared; a module per server;
``discovery`` looks on the default ports."""
