"""Where models are: what ``-m`` names (a path, a folder, a URL, the Hub, Ollama), headers read
over HTTP ranges and cached, and every GGUF in this machine's stores."""
